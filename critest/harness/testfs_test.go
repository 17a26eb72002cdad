package harness

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The mount that holds a directory is the longest mount point at or above it, and
// mountsUnder("/") lists every mount.
func TestMountHolding(t *testing.T) {
	root, err := mountHolding("/")
	require.NoError(t, err)
	require.Equal(t, "/", root.Point)
	proc, err := mountHolding("/proc/self")
	require.NoError(t, err)
	require.Equal(t, "/proc", proc.Point)
	require.Equal(t, "proc", proc.FSType)
	all, err := mountsUnder("/")
	require.NoError(t, err)
	require.Greater(t, len(all), 1, "mountsUnder(/) lists /proc too")
	bare, err := JournallessExt4("/proc")
	require.NoError(t, err)
	require.False(t, bare, "/proc is no ext4")
}
