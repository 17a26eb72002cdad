package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestShimFlags(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want map[string]string
	}{
		{"runc shim", []string{"-namespace", "shimd", "-id", "abc", "-address", "/run/c.sock", "-debug"},
			map[string]string{"namespace": "shimd", "id": "abc", "address": "/run/c.sock"}},
		{"equals and double dash", []string{"--namespace=k8s.io", "-id=x"}, map[string]string{"namespace": "k8s.io", "id": "x"}},
		{"bare words ignored", []string{"start", "-id", "y"}, map[string]string{"id": "y"}},
		{"flag without value", []string{"-id"}, map[string]string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, shimFlags(tc.args))
		})
	}
}

func TestSocketPathOf(t *testing.T) {
	table := "Num       RefCount Protocol Flags    Type St Inode Path\n" +
		"0000000000000000: 00000002 00000000 00010000 0001 01 111 /run/containerd/s/abc\n" +
		"0000000000000000: 00000003 00000000 00000000 0001 03 222 /run/containerd/s/abc\n" +
		"0000000000000000: 00000002 00000000 00010000 0001 01 333 /other.sock\n" +
		"0000000000000000: 00000003 00000000 00000000 0001 03 444\n"
	p, err := socketPathOf(table, map[string]bool{"222": true, "111": true, "333": true, "444": true}, "abc")
	require.NoError(t, err)
	require.Equal(t, "/run/containerd/s/abc", p)
	_, err = socketPathOf(table, map[string]bool{"222": true, "444": true}, "abc")
	require.Error(t, err, "connected sockets are not listening ones")
	_, err = socketPathOf(table, map[string]bool{"333": true}, "abc")
	require.Error(t, err, "a listening socket of another name (the debug socket) is not the one")
}

func TestShimSocketName(t *testing.T) {
	// Seen in containerd 2.4.2's log: "connecting to shim <id>" with this address.
	require.Equal(t, "0fcd7926e54e6f25e38f41716b95eba4628c77c302916150a80a9fb3e0aeab6d",
		shimSocketName("/tmp/shimd-it-4228702219/c/containerd.sock", "shimd-ea1e22",
			"fa815b467e02a69af443fc30eff1f24ebf742a24418673d34502afa1668c1fde"))
}

func TestDeletedBundle(t *testing.T) {
	for cwd, want := range map[string]bool{
		"/run/containerd/io.containerd.runtime.v2.task/ns/0123abc":                      false,
		"/run/containerd/io.containerd.runtime.v2.task/ns/.0123abc":                     true,
		"/run/containerd/io.containerd.runtime.v2.task/ns/.0123abc (deleted)":           true,
		"/run/containerd/io.containerd.runtime.v2.task/ns/0123abc (deleted)":            true,
		"/tmp/shimd-it-1/c/state/io.containerd.runtime.v2.task/shimd-e54889/10958088ef": false,
	} {
		if got := deletedBundle(cwd); got != want {
			t.Errorf("deletedBundle(%q) = %v, want %v", cwd, got, want)
		}
	}
}

func TestShimTaskIDs(t *testing.T) {
	pod, c1, c2, other := strings.Repeat("a", 64), strings.Repeat("b", 64), strings.Repeat("c", 64), strings.Repeat("d", 64)
	sandboxOf := map[string]string{pod: "", c1: pod, c2: pod, other: strings.Repeat("e", 64)}
	// A pod's shim, started for its pause task: every container of the pod counts.
	require.Equal(t, []string{pod, c1, c2}, shimTaskIDs(shimProc{id: pod}, "", false, sandboxOf))
	// Found on the pod's socket (a pause-less pod's shim, started for its first
	// container): the pod's id and its other containers count too.
	require.Equal(t, []string{c1, pod, c2}, shimTaskIDs(shimProc{id: c1}, pod, true, sandboxOf))
	// A container's own shim (no pod record, e.g. the pod is gone).
	require.Equal(t, []string{other}, shimTaskIDs(shimProc{id: other}, "", false, map[string]string{other: ""}))
}

// A shim is taken for stuck in its start only when its delete call timed out and it
// has no child process; hasChildren sees a child of any thread.
func TestStuckShim(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	require.True(t, hasChildren(os.Getpid()), "this test's process has the sleep as a child")
	require.False(t, hasChildren(cmd.Process.Pid), "sleep has no child")

	timedOut := fmt.Errorf("ttrpc: %w", context.DeadlineExceeded)
	require.True(t, stuckShim(timedOut, cmd.Process.Pid))
	require.False(t, stuckShim(timedOut, os.Getpid()), "a shim with a process is never taken for stuck")
	require.False(t, stuckShim(errors.New("ttrpc: closed"), cmd.Process.Pid), "a shim that answered is not stuck")
	require.False(t, stuckShim(nil, cmd.Process.Pid))
}
