package harness

import (
	"bufio"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// NewBaseDir creates a short private directory /tmp/shimd-it-NNNN for one
// test (unix socket paths are limited to 108 bytes, and containerd's shim
// socket directory to 42, so t.TempDir is too long). At cleanup it unmounts
// whatever is still mounted below it, then removes it, unless SHIMD_KEEP=1,
// in which case it is left for inspection (still unmounted). With
// SHIMD_TEST_FS=ext4 it is a filesystem of its own (testfs.go).
func NewBaseDir(t testing.TB) string {
	t.Helper()
	summaryOf(t)
	dir, err := os.MkdirTemp("/tmp", "shimd-it-")
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	// Its filesystem's cleanup is registered first, so that it runs last.
	mountTestFS(t, dir)
	t.Cleanup(func() { removeBaseDir(t, dir) })
	// Traversable by all, like containerd's own state dir: user-namespaced
	// containers reach their rootfs below it as an unprivileged host uid.
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatalf("harness: %v", err)
	}
	return dir
}

func removeBaseDir(t testing.TB, dir string) {
	mounts, err := mountsUnder(dir)
	if err != nil {
		t.Errorf("harness: not removing %s: %v", dir, err)
		return
	}
	// Deepest first, so that nested mounts go before their parents.
	sort.Slice(mounts, func(i, j int) bool { return len(mounts[i].Point) > len(mounts[j].Point) })
	for _, m := range mounts {
		if err := unix.Unmount(m.Point, unix.MNT_DETACH); err != nil && err != unix.EINVAL && err != unix.ENOENT {
			t.Logf("harness: unmount %s: %v", m.Point, err)
		}
	}
	if left, _ := mountsUnder(dir); len(left) > 0 {
		// Never RemoveAll across a mount point: it would delete what is mounted.
		t.Errorf("harness: not removing %s: still mounted below it: %v", dir, left)
		return
	}
	if os.Getenv("SHIMD_KEEP") == "1" {
		t.Logf("harness: SHIMD_KEEP=1: keeping %s", dir)
		return
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Logf("harness: remove %s: %v", dir, err)
	}
}

// mount is one line of /proc/self/mountinfo.
type mount struct {
	Point  string
	FSType string
	Source string
	Dev    string // major:minor of the filesystem's device
}

func (m mount) String() string { return m.Point + " (" + m.FSType + " " + m.Source + ")" }

// mountsUnder lists the mounts at or below dir in the test's mount namespace
// (which is the one containerd and shimd run in).
func mountsUnder(dir string) ([]mount, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	dir = filepath.Clean(dir)
	prefix := strings.TrimSuffix(dir, "/") + "/" // "/" holds every mount
	var out []mount
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		m, ok := parseMountinfo(sc.Text())
		if !ok {
			continue
		}
		if m.Point == dir || strings.HasPrefix(m.Point, prefix) {
			out = append(out, m)
		}
	}
	return out, sc.Err()
}

// MountPointsUnder lists the mount points at or below dir in the test's mount namespace.
func MountPointsUnder(dir string) ([]string, error) {
	ms, err := mountsUnder(dir)
	out := make([]string, 0, len(ms))
	for _, m := range ms {
		out = append(out, m.Point)
	}
	return out, err
}

// parseMountinfo parses "id parent maj:min root point opts [optional...] - fstype source superopts".
func parseMountinfo(line string) (mount, bool) {
	f := strings.Fields(line)
	if len(f) < 7 {
		return mount{}, false
	}
	m := mount{Point: unescapeMountinfo(f[4]), Dev: f[2]}
	for i := 6; i < len(f); i++ {
		if f[i] == "-" {
			if i+2 < len(f) {
				m.FSType, m.Source = f[i+1], unescapeMountinfo(f[i+2])
			}
			break
		}
	}
	return m, true
}

// unescapeMountinfo undoes the kernel's octal escapes (\040 for space, ...).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
