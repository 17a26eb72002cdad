package harness

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// LoopFS makes an ext4 filesystem of size (truncate's form: "200M") in a file of a
// test directory, loop-mounts it and returns its mount point. A cleanup unmounts it
// (mount -o loop sets autoclear: the loop device goes with it); call it before
// starting whatever uses the filesystem, so that its cleanup runs after theirs.
func LoopFS(t testing.TB, size string) string {
	t.Helper()
	dir := t.TempDir()
	img, mnt := filepath.Join(dir, "fs.img"), filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		Fatalf(t, "loop fs: %v", err)
	}
	for _, cmd := range [][]string{{"truncate", "-s", size, img}, {"mkfs.ext4", "-q", "-F", img}, {"mount", "-o", "loop", img, mnt}} {
		if out, err := exec.Command(cmd[0], cmd[1:]...).CombinedOutput(); err != nil {
			Fatalf(t, "loop fs: %v: %v: %s", cmd, err, out)
		}
	}
	t.Cleanup(func() {
		if err := unix.Unmount(mnt, 0); err != nil {
			t.Logf("loop fs: unmount %s: %v; detaching", mnt, err)
			_ = unix.Unmount(mnt, unix.MNT_DETACH)
		}
	})
	return mnt
}
