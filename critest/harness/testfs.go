package harness

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// TestFSEnv chooses the filesystem of the tests' base directories (NewBaseDir):
// unset or "host", /tmp as it is; "ext4", a journaled ext4 of each base
// directory's own on a loop device (TestFSSizeEnv, default 32G, sparse in /var/tmp),
// mounted at the base directory and gone with it.
//
// Why: on an ext4 without a journal the kernel skips, for every inode it allocates,
// the inodes deleted in the last 60 to 300 seconds (find_inode_bit's
// recently_deleted check, made only when there is no journal), so creating files
// soon after deleting many costs kernel time that grows with how many were deleted.
// A pull unpacks tens of thousands of files right after the benchmark removed the
// last round's, and a pod burst writes each pod's state files after the last
// teardown removed them: on such a host the runtimes' figures measure the
// filesystem's history (docs/benchmarks.md, "The journal-less root filesystem").
const (
	TestFSEnv     = "SHIMD_TEST_FS"
	TestFSSizeEnv = "SHIMD_TEST_FS_SIZE"
)

// baseMounts holds the base directories that are mount points of their own
// (TestFSEnv=ext4): the leak checks do not count those mounts.
var baseMounts sync.Map

func isBaseMount(point string) bool {
	_, ok := baseMounts.Load(point)
	return ok
}

// mountTestFS makes dir the mount point of a new journaled ext4 when TestFSEnv
// says so; the image file goes when the test ends, after the base directory's own
// cleanup (which unmounts it).
func mountTestFS(t testing.TB, dir string) {
	t.Helper()
	switch fs := os.Getenv(TestFSEnv); fs {
	case "", "host":
		return
	case "ext4":
	default:
		t.Fatalf("harness: %s=%q: want host or ext4", TestFSEnv, fs)
	}
	size := os.Getenv(TestFSSizeEnv)
	if size == "" {
		size = "32G"
	}
	img, err := os.CreateTemp("/var/tmp", "shimd-testfs-*.img")
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	img.Close()
	t.Cleanup(func() {
		if os.Getenv("SHIMD_KEEP") == "1" {
			t.Logf("harness: SHIMD_KEEP=1: keeping %s (the filesystem of %s)", img.Name(), dir)
			return
		}
		os.Remove(img.Name())
	})
	// The inode tables and the journal are written now, not by ext4lazyinit while
	// the test measures.
	for _, args := range [][]string{
		{"truncate", "-s", size, img.Name()},
		{"mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", img.Name()},
		{"mount", "-o", "loop", img.Name(), dir},
	} {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("harness: %s=ext4: %s: %v: %s", TestFSEnv, strings.Join(args, " "), err, out)
		}
	}
	baseMounts.Store(filepath.Clean(dir), true)
	t.Cleanup(func() { baseMounts.Delete(filepath.Clean(dir)) })
}

// JournallessExt4 tells whether dir lies on an ext4 without a journal (no
// /proc/fs/jbd2 entry for its device), where file churn costs what TestFSEnv says.
func JournallessExt4(dir string) (bool, error) {
	m, err := mountHolding(dir)
	if err != nil || m.FSType != "ext4" {
		return false, err
	}
	link, err := os.Readlink("/sys/dev/block/" + m.Dev)
	if err != nil {
		return false, err
	}
	ents, err := os.ReadDir("/proc/fs/jbd2")
	if err != nil && !os.IsNotExist(err) {
		return false, err
	}
	for _, e := range ents {
		// jbd2 names a journal "<device>-<journal inode>", e.g. vda-8.
		if strings.HasPrefix(e.Name(), filepath.Base(link)+"-") {
			return false, nil
		}
	}
	return true, nil
}

// mountHolding is the mount whose filesystem holds dir: the last one listed at
// the longest mount point at or above it.
func mountHolding(dir string) (mount, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return mount{}, err
	}
	all, err := mountsUnder("/")
	if err != nil {
		return mount{}, err
	}
	var best mount
	for _, m := range all {
		if (dir == m.Point || strings.HasPrefix(dir, strings.TrimSuffix(m.Point, "/")+"/")) && len(m.Point) >= len(best.Point) {
			best = m
		}
	}
	if best.Point == "" {
		return mount{}, fmt.Errorf("no mount holds %s", dir)
	}
	return best, nil
}
