package container

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/network"
	"github.com/shimd/shimd/streaming"
)

func testContainer(s *Manager, id string, state runtimeapi.ContainerState) *Container {
	c := &Container{ID: id, Name: id, Config: &runtimeapi.ContainerConfig{}, exited: make(chan struct{})}
	c.status.State = state
	s.containers.add(c)
	return c
}

// Running resolves a prefix to a running container; others are refused.
func TestRunning(t *testing.T) {
	s := &Manager{containers: newContainerStore()}
	testContainer(s, "running0123", runtimeapi.ContainerState_CONTAINER_RUNNING)
	testContainer(s, "created0123", runtimeapi.ContainerState_CONTAINER_CREATED)
	id, err := s.Running("runn")
	require.NoError(t, err)
	require.Equal(t, "running0123", id, "the prefix is resolved before the URL is handed out")
	_, err = s.Running("nope")
	require.ErrorIs(t, err, errdefs.ErrNotFound)
	_, err = s.Running("created0123")
	require.ErrorIs(t, err, errdefs.ErrFailedPrecondition)
}

func TestTerminalSizes(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	in := make(chan streaming.TerminalSize, 3)
	in <- streaming.TerminalSize{Width: 80, Height: 24}
	in <- streaming.TerminalSize{} // ignored
	in <- streaming.TerminalSize{Width: 100, Height: 50}
	out := terminalSizes(ctx, in)
	require.Equal(t, [2]uint16{80, 24}, <-out)
	require.Equal(t, [2]uint16{100, 50}, <-out)
	cancel()
	_, open := <-out
	require.False(t, open, "closed when ctx ends")
	require.Nil(t, terminalSizes(ctx, nil))
}

// Attach hands the container's output to the client and the client's input to the
// container; the session ends when the container's output does, not the container.
func TestAttachCopiesBothWays(t *testing.T) {
	s := &Manager{containers: newContainerStore()}
	c := testContainer(s, "att", runtimeapi.ContainerState_CONTAINER_RUNNING)
	stdinR, stdinW := io.Pipe()
	c.io = &containerIO{done: make(chan struct{}), stdout: &broadcaster{}, stderr: &broadcaster{}, stdin: stdinW}
	clientIn, clientInW := io.Pipe()
	out, outW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- (&Streams{s}).Attach(context.Background(), "att", clientIn, outW, nil, false, nil)
	}()
	go func() { _, _ = clientInW.Write([]byte("to the container\n")) }()
	got := make([]byte, len("to the container\n"))
	_, err := io.ReadFull(stdinR, got)
	require.NoError(t, err)
	require.Equal(t, "to the container\n", string(got))

	// The broadcaster gets the writer when Attach has run; keep writing until it does.
	read := make(chan string, 1)
	go func() {
		b := make([]byte, 6)
		_, _ = io.ReadFull(out, b)
		read <- string(b)
	}()
	deadline := time.Now().Add(5 * time.Second)
	attached := func() bool {
		c.io.stdout.mu.Lock()
		defer c.io.stdout.mu.Unlock()
		return len(c.io.stdout.writers) > 0
	}
	for !attached() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	_, _ = c.io.stdout.Write([]byte("hello\n"))
	require.Equal(t, "hello\n", <-read)
	c.io.stdout.closeAll()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("attach did not end with the container's output")
	}
	require.Equal(t, runtimeapi.ContainerState_CONTAINER_RUNNING, c.Status().State)
	clientInW.Close()
}

func TestDialPodOnTheHost(t *testing.T) {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	c, err := network.DialPod("", int32(port))
	require.NoError(t, err)
	c.Close()
	l.Close()
	_, err = network.DialPod("", int32(port))
	require.Error(t, err)
	require.True(t, strings.Contains(err.Error(), strconv.Itoa(port)), err.Error())
	require.False(t, errors.Is(err, errdefs.ErrNotFound))
}
