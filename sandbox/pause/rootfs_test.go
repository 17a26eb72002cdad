package pause

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestWriteRootfs(t *testing.T) {
	parent := filepath.Join(t.TempDir(), "pause-rootfs")
	dir, err := WriteRootfs(parent)
	require.NoError(t, err)
	require.Equal(t, parent, filepath.Dir(dir))
	got, err := os.ReadFile(filepath.Join(dir, "pause"))
	require.NoError(t, err)
	require.True(t, bytes.Equal(binary, got), "the rootfs holds the built-in binary")
	fi, err := os.Stat(filepath.Join(dir, "pause"))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o755), fi.Mode().Perm()&0o755)
	for _, d := range rootfsDirs {
		fi, err := os.Stat(filepath.Join(dir, d))
		require.NoError(t, err, d)
		require.True(t, fi.IsDir(), d)
	}
	entries, err := os.ReadDir(parent)
	require.NoError(t, err)
	require.Len(t, entries, 1, "no temporary directory is left")

	// Again: the same directory, left as it is.
	again, err := WriteRootfs(parent)
	require.NoError(t, err)
	require.Equal(t, dir, again)
}

func TestWriteRootfsRepairs(t *testing.T) {
	parent := t.TempDir()
	dir, err := WriteRootfs(parent)
	require.NoError(t, err)
	// A binary changed by hand, a mount point gone, a temporary directory left by a
	// crash: the next call makes the directory whole again.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "pause"), []byte("not pause"), 0o755))
	require.NoError(t, os.Remove(filepath.Join(dir, "sys")))
	require.NoError(t, os.MkdirAll(dir+".tmp/junk", 0o755))
	again, err := WriteRootfs(parent)
	require.NoError(t, err)
	require.Equal(t, dir, again)
	ok, err := rootfsComplete(dir)
	require.NoError(t, err)
	require.True(t, ok)
	_, err = os.Stat(dir + ".tmp")
	require.True(t, os.IsNotExist(err), "the temporary directory is gone")
}
