package harness

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// SlowFS delays the operations that change the disk and passes the rest through.
// Needs root and /dev/fuse; skipped without.
func TestSlowFS(t *testing.T) {
	if why := SlowFSAvailable(); why != "" {
		t.Skip(why)
	}
	backing, dir := t.TempDir(), t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(backing, "old"), []byte("old\n"), 0o644))
	const delay = 100 * time.Millisecond
	s := MountSlowFS(t, dir, backing, delay)

	data, err := os.ReadFile(filepath.Join(dir, "old"))
	require.NoError(t, err)
	require.Equal(t, "old\n", string(data), "a backing file read through the mount")

	done := make(chan error, 1)
	t0 := time.Now()
	go func() {
		// mkdir, create, write, fsync, rename: 5 delays.
		if err := os.Mkdir(filepath.Join(dir, "d"), 0o755); err != nil {
			done <- err
			return
		}
		f, err := os.Create(filepath.Join(dir, "d", "tmp"))
		if err != nil {
			done <- err
			return
		}
		_, err = f.Write([]byte("new\n"))
		if err == nil {
			err = f.Sync()
		}
		f.Close()
		if err == nil {
			err = os.Rename(filepath.Join(dir, "d", "tmp"), filepath.Join(dir, "d", "file"))
		}
		done <- err
	}()
	require.Eventually(t, func() bool { return len(s.Pending()) > 0 }, time.Second, time.Millisecond, "no pending operation")
	t.Logf("pending: %v", s.Pending())
	require.NoError(t, <-done)
	took := time.Since(t0)
	t.Logf("mkdir+create+write+fsync+rename took %v, %d delayed", took, s.Delayed())
	require.GreaterOrEqual(t, took, 5*delay)
	require.GreaterOrEqual(t, s.Delayed(), int64(5))
	data, err = os.ReadFile(filepath.Join(backing, "d", "file"))
	require.NoError(t, err)
	require.Equal(t, "new\n", string(data), "the write reached the backing dir")

	s.SetDelay(0)
	t0 = time.Now()
	require.NoError(t, os.RemoveAll(filepath.Join(dir, "d")))
	require.Less(t, time.Since(t0), delay, "no delay after SetDelay(0)")
	require.NoError(t, s.Unmount())
	require.NoError(t, s.Unmount(), "a second unmount")
	_, err = os.Stat(filepath.Join(dir, "old"))
	require.ErrorIs(t, err, os.ErrNotExist, "still mounted")
}
