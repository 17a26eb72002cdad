package stats

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func TestParsePids(t *testing.T) {
	pids, err := parsePids([]byte("1\n42\n\n7\n"))
	require.NoError(t, err)
	require.Equal(t, []uint32{1, 42, 7}, pids)
	pids, err = parsePids(nil)
	require.NoError(t, err)
	require.Empty(t, pids, "an empty group has no processes")
	_, err = parsePids([]byte("1\nx\n"))
	require.Error(t, err)
}

// A fake /proc: process 10 has three fds, two of them sockets; process 11 one
// pipe; process 12 exited (no directory); process 13's fds cannot be read.
func TestCountFDs(t *testing.T) {
	proc := t.TempDir()
	links := map[string]map[string]string{
		"10": {"0": "/dev/null", "3": "socket:[1234]", "4": "socket:[5678]"},
		"11": {"0": "pipe:[99]"},
	}
	for pid, fds := range links {
		dir := filepath.Join(proc, pid, "fd")
		require.NoError(t, os.MkdirAll(dir, 0o755))
		for fd, target := range fds {
			require.NoError(t, os.Symlink(target, filepath.Join(dir, fd)))
		}
	}
	require.NoError(t, os.WriteFile(filepath.Join(proc, "13"), nil, 0o600)) // not a directory
	fds, sockets := countFDs(proc, []uint32{10, 11, 12, 13})
	require.Equal(t, uint64(4), fds)
	require.Equal(t, uint64(2), sockets)
	fds, sockets = countFDs(proc, nil)
	require.Zero(t, fds)
	require.Zero(t, sockets)
}

func TestFSCapacity(t *testing.T) {
	require.Equal(t, fsCapacity{bytes: 4096 * 100, inodes: 50, inodesFree: 20},
		capacityOf(unix.Statfs_t{Bsize: 4096, Blocks: 100, Bavail: 10, Files: 50, Ffree: 20}))
	fs, err := fsCapacityOf(t.TempDir())
	require.NoError(t, err)
	require.NotZero(t, fs.bytes)
	_, err = fsCapacityOf(filepath.Join(t.TempDir(), "missing"))
	require.Error(t, err)
}

func TestKernelMemory(t *testing.T) {
	dir := t.TempDir()
	require.Nil(t, kernelMemory(""), "no group")
	require.Nil(t, kernelMemory(dir), "no memory.stat")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "memory.stat"), []byte("anon 100\nfile 200\nkernel_stack 16\n"), 0o600))
	require.Nil(t, kernelMemory(dir), "before Linux 5.18: no kernel line")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "memory.stat"), []byte("anon 100\nfile 200\nkernel 8192\nkernel_stack 16\n"), 0o600))
	require.Equal(t, uint64(8192), *kernelMemory(dir))
}
