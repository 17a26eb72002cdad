package container

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// An exit is OOMKilled on a TaskOOM, or, when that event was lost, on a SIGKILL that
// shimd did not send while the pod's cgroup counted new OOM kills.
func TestOOMKilled(t *testing.T) {
	group := t.TempDir()
	setKills := func(n string) {
		require.NoError(t, os.WriteFile(filepath.Join(group, "memory.events"), []byte("oom 1\noom_kill "+n+"\noom_group_kill 0\n"), 0o644))
	}
	setKills("2")
	fresh := func() *Container {
		c := &Container{ID: "c", exited: make(chan struct{})}
		c.setPodOOMBase(readPodOOMBaseOf(group))
		return c
	}

	c := fresh()
	require.False(t, oomKilled(c, exitStatusSIGKILL), "no new kill in the pod")
	c.markOOM()
	require.True(t, oomKilled(c, 0), "a TaskOOM counts whatever the status")

	setKills("3")
	require.False(t, oomKilled(fresh(), exitStatusSIGKILL), "the base is read at task create")
	c = fresh()
	setKills("5")
	require.True(t, oomKilled(c, exitStatusSIGKILL), "SIGKILL with new kills in the pod")
	require.False(t, oomKilled(c, 1), "an exit of its own")
	c.markKilledByShimd()
	require.False(t, oomKilled(c, exitStatusSIGKILL), "shimd's own SIGKILL")

	c = &Container{ID: "v1", exited: make(chan struct{})}
	c.setPodOOMBase(podOOMBase{})
	require.False(t, oomKilled(c, exitStatusSIGKILL), "no pod group: nothing to tell")
}
