//go:build integration

package cgroup

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Clear kills what is left in a task's cgroup and removes the cgroup from every
// hierarchy; Remove alone refuses while a process is in it.
func TestClearKillsLeftProcesses(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	dir := fmt.Sprintf("/shimd-cgroup-test-%d/task", os.Getpid())
	t.Cleanup(func() {
		for _, mnt := range mounts() {
			os.Remove(filepath.Join(mnt, dir))
			os.Remove(filepath.Join(mnt, filepath.Dir(dir)))
		}
	})
	var made []string
	for _, mnt := range mounts() {
		p := filepath.Join(mnt, dir)
		if err := os.MkdirAll(p, 0o755); err == nil {
			made = append(made, p)
		}
	}
	require.NotEmpty(t, made)
	sleeper := exec.Command("sleep", "600")
	require.NoError(t, sleeper.Start())
	waited := make(chan error, 1)
	go func() { waited <- sleeper.Wait() }()
	t.Cleanup(func() { _ = sleeper.Process.Kill() })
	pid := strconv.Itoa(sleeper.Process.Pid)
	joined := 0
	for _, p := range made {
		if os.WriteFile(filepath.Join(p, "cgroup.procs"), []byte(pid), 0o644) == nil {
			joined++
		}
	}
	require.NotZero(t, joined, "the process joined the cgroup")
	require.ErrorIs(t, Remove(dir), errBusy)

	killed, err := Clear(context.Background(), dir)
	require.NoError(t, err)
	require.Equal(t, 1, killed)
	select {
	case err := <-waited:
		require.ErrorContains(t, err, "killed")
	case <-time.After(5 * time.Second):
		t.Fatal("the process in the cgroup still runs")
	}
	for _, p := range made {
		require.NoDirExists(t, p)
	}
	killed, err = Clear(context.Background(), dir)
	require.NoError(t, err, "a cgroup already gone")
	require.Zero(t, killed)
}
