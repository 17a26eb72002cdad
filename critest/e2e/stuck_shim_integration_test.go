//go:build integration

package e2e

import (
	"crypto/sha256"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/shimd/shimd/critest/harness"
	"github.com/shimd/shimd/pod"
)

// A shim stuck in its own start: containerd went away after it opened the reading
// end of the shim's log FIFO and before the shim opened the writing end, so the
// shim's open blocks for good, and the socket it was handed is never served (seen
// in CI's crash soak: containerd killed while it started a pod's shim). Made here by
// hand: the runc shim in its daemon mode, in a bundle whose log FIFO nobody reads,
// handed a listening socket at the address containerd gives the shim of that id.
// shimd's recovery finds it (a shim of its namespace that serves no task), gets no
// answer from it, sees it runs no process, and kills it.
func TestStuckShimIsKilled(t *testing.T) {
	requireRoot(t)
	env := harness.New(t, harness.Options{})
	ns, address := env.Shimd.Namespace(), env.Containerd.Address()
	id := pod.NewID()

	bundle := t.TempDir()
	require.NoError(t, unix.Mkfifo(filepath.Join(bundle, "log"), 0o700))
	sockDir := "/run/containerd/s" // containerd's pkg/shim socket directory
	require.NoError(t, os.MkdirAll(sockDir, 0o711))
	sockPath := filepath.Join(sockDir, fmt.Sprintf("%x", sha256.Sum256([]byte(filepath.Join(address, ns, id)))))
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sockPath, Net: "unix"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.Remove(sockPath) })
	l.SetUnlinkOnClose(false) // the socket is the shim's from here on
	lf, err := l.File()
	require.NoError(t, err)

	shim := exec.Command(filepath.Join(harness.Tools().BinDir, "containerd-shim-runc-v2"), "-namespace", ns, "-id", id, "-address", address)
	shim.Dir = bundle
	shim.Env = append(os.Environ(), "TTRPC_ADDRESS="+address+".ttrpc")
	shim.ExtraFiles = []*os.File{lf} // fd 3: the socket to serve, as the shim's start hands it
	shim.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, shim.Start())
	exitc := make(chan error, 1)
	go func() { exitc <- shim.Wait() }()
	t.Cleanup(func() { _ = shim.Process.Kill() })
	lf.Close()
	l.Close()

	// It blocks in its start: alive, and its socket takes connections nobody serves.
	time.Sleep(time.Second)
	select {
	case err := <-exitc:
		t.Fatalf("the hand-made shim exited instead of hanging in its start: %v", err)
	default:
	}
	conn, err := net.DialTimeout("unix", sockPath, 2*time.Second)
	require.NoError(t, err, "the stuck shim's socket takes connections")
	conn.Close()

	restartShimd(t, env) // recovery reaps the shims that serve no task
	select {
	case <-exitc:
	case <-time.After(30 * time.Second):
		t.Fatal("the stuck shim is still running 30 s after shimd's recovery")
	}
	log, err := os.ReadFile(env.Shimd.LogPath())
	require.NoError(t, err)
	require.Contains(t, string(log), "stuck in its start", "shimd's log says why it killed the shim")
	env.CheckNoLeaks(t)
}
