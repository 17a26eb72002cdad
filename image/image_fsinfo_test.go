package image

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDirUsage(t *testing.T) {
	dir := t.TempDir()
	u, err := dirUsage(context.Background(), dir)
	require.NoError(t, err)
	require.Zero(t, u.Size)
	for _, name := range []string{"a", "b"} {
		require.NoError(t, os.MkdirAll(filepath.Join(dir, name, "fs"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, name, "fs", "data"), make([]byte, 64<<10), 0o644))
	}
	u, err = dirUsage(context.Background(), dir)
	require.NoError(t, err)
	require.GreaterOrEqual(t, u.Size, int64(2*64<<10))
	require.Equal(t, int64(6), u.Inodes) // two of: dir, fs, data
	_, err = dirUsage(context.Background(), filepath.Join(dir, "missing"))
	require.ErrorIs(t, err, os.ErrNotExist)
}
