//go:build integration

package e2e

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
)

// notifySocket plays systemd's side of sd_notify: a unixgram socket whose datagrams
// arrive on the returned channel.
func notifySocket(t *testing.T) (string, <-chan string) {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "shimd-notify-")
	require.NoError(t, err)
	path := filepath.Join(dir, "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	require.NoError(t, err)
	msgs := make(chan string, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 4096)
		for {
			n, _, err := conn.ReadFromUnix(buf)
			if err != nil {
				return
			}
			msgs <- string(buf[:n])
		}
	}()
	t.Cleanup(func() {
		conn.Close()
		<-done
		os.RemoveAll(dir)
	})
	return path, msgs
}

// waitNotify waits for a datagram that holds want.
func waitNotify(t *testing.T, msgs <-chan string, want string, timeout time.Duration) {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case m := <-msgs:
			if strings.Contains(m, want) {
				return
			}
		case <-deadline:
			t.Fatalf("no %s from shimd within %s", want, timeout)
		}
	}
}

// READY=1 reaches systemd only once recovery has finished: started while containerd
// is down, shimd stays silent (and Unavailable) until containerd is back.
func TestSystemdNotifyReadyAfterRecovery(t *testing.T) {
	requireRoot(t)
	sock, msgs := notifySocket(t)
	env := harness.New(t, harness.Options{Shimd: harness.ShimdOptions{Env: []string{"NOTIFY_SOCKET=" + sock}}})
	waitNotify(t, msgs, "READY=1", 30*time.Second)
	rs := env.Shimd.Runtime(t)
	id := runPod(t, rs, podConfig("notify"))

	env.Shimd.Kill9()
	env.Containerd.Stop()
	env.Shimd.StartUnrecovered(t) // answers Version, nothing else
	select {
	case m := <-msgs:
		t.Fatalf("shimd notified %q before it could recover (containerd is down)", m)
	case <-time.After(3 * time.Second):
	}
	_, err := rs.ListPodSandbox(ctxT(t, 5*time.Second), &runtimeapi.ListPodSandboxRequest{})
	require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)

	env.Containerd.Restart(t)
	waitNotify(t, msgs, "READY=1", 60*time.Second)
	// Right after READY=1, the recovered pod is served.
	pods := listPods(t, rs, nil)
	require.Len(t, pods, 1)
	require.Equal(t, id, pods[0].Id)
	require.Equal(t, runtimeapi.PodSandboxState_SANDBOX_READY, pods[0].State)
	log, err := os.ReadFile(env.Shimd.LogPath())
	require.NoError(t, err)
	require.Contains(t, string(log), "recovery done")

	stopRemove(t, rs, id)
	env.Shimd.Stop()
	waitNotify(t, msgs, "STOPPING=1", 10*time.Second)
	env.Shimd.Start(t) // for the leak check
}
