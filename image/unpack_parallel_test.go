package image

import (
	"archive/tar"
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// The directories the applier makes for entries without an entry of their own: not
// those the tar has, nor the root.
func TestTarNamesImplicit(t *testing.T) {
	var n tarNames
	for _, h := range []tar.Header{
		{Name: "./", Typeflag: tar.TypeDir},
		{Name: "a/", Typeflag: tar.TypeDir},
		{Name: "a/b/c", Typeflag: tar.TypeReg},
		{Name: "./x", Typeflag: tar.TypeReg},
		{Name: "d/.wh.e", Typeflag: tar.TypeReg},
		{Name: "f/g/", Typeflag: tar.TypeDir},
		{Name: "f/g/../h", Typeflag: tar.TypeReg},
		{Name: "late/file", Typeflag: tar.TypeReg},
		{Name: "late", Typeflag: tar.TypeDir}, // its entry after its file's
	} {
		h := h
		h.Name = filepath.Clean(h.Name) // as archive.Apply hands them over
		ok, err := n.record(&h)
		require.NoError(t, err)
		require.True(t, ok, "every entry is applied")
	}
	require.Equal(t, []string{"/a/b", "/d", "/f"}, n.implicit())
	require.Empty(t, (&tarNames{}).implicit())
}

// viewSnapshotter answers View with the given lower directories, top first.
type viewSnapshotter struct {
	snapshots.Snapshotter
	lowers  []string
	removed []string
}

func (v *viewSnapshotter) View(_ context.Context, key, parent string, _ ...snapshots.Opt) ([]mount.Mount, error) {
	if len(v.lowers) == 1 {
		return []mount.Mount{{Type: "bind", Source: v.lowers[0], Options: []string{"ro", "rbind"}}}, nil
	}
	return []mount.Mount{{Type: "overlay", Source: "overlay", Options: []string{"lowerdir=" + strings.Join(v.lowers, ":")}}}, nil
}

func (v *viewSnapshotter) Remove(_ context.Context, key string) error {
	v.removed = append(v.removed, key)
	return nil
}

// A directory made for a layer's entries takes the mode, owner and xattrs (not
// trusted.*) of the first directory of its path in the chain below, top layer first,
// as it would applied on its parent; where the first layer with the path has
// something else there, or none has it, it stays as made.
func TestInheritDirs(t *testing.T) {
	upper, top, bottom := t.TempDir(), t.TempDir(), t.TempDir()
	mk := func(dir, rel string, mode os.FileMode) string {
		p := filepath.Join(dir, rel)
		require.NoError(t, os.MkdirAll(p, 0o755))
		require.NoError(t, os.Chmod(p, mode))
		return p
	}
	for _, d := range []string{"a", "a/n", "b", "c", "d", "e"} {
		mk(upper, d, 0o755) // as the applier makes them
	}
	require.NoError(t, os.Symlink("a", filepath.Join(upper, "s")))

	a := mk(top, "a", 0o700|os.ModeSetgid)
	mk(top, "a/n", 0o711)
	xattrs := unix.Lsetxattr(a, "user.shimd", []byte("kept"), 0) == nil
	require.NoError(t, os.WriteFile(filepath.Join(top, "b"), nil, 0o644)) // a file on top
	mk(bottom, "b", 0o700)                                                // hidden by it
	require.NoError(t, os.Symlink("elsewhere", filepath.Join(top, "c")))
	mk(bottom, "d", 0o750)
	mk(bottom, "s", 0o700)
	root := os.Geteuid() == 0
	if root {
		require.NoError(t, os.Chown(a, 1234, 5678))
	}

	sn := &viewSnapshotter{lowers: []string{top, bottom}}
	u := &streamUnpacker{snapshotter: "overlayfs", sn: sn}
	require.NoError(t, u.inheritDirs(context.Background(), upper, []string{"/a", "/a/n", "/b", "/c", "/d", "/e", "/s"}, "parent"))
	require.Len(t, sn.removed, 1, "the view is removed")

	mode := func(rel string) os.FileMode {
		fi, err := os.Lstat(filepath.Join(upper, rel))
		require.NoError(t, err)
		return fi.Mode() & (os.ModePerm | os.ModeSetgid | os.ModeSymlink)
	}
	require.Equal(t, 0o700|os.ModeSetgid, mode("a"))
	require.Equal(t, os.FileMode(0o711), mode("a/n"))
	require.Equal(t, os.FileMode(0o755), mode("b"), "a file above the lower directory")
	require.Equal(t, os.FileMode(0o755), mode("c"), "a symbolic link above")
	require.Equal(t, os.FileMode(0o750), mode("d"), "only the bottom layer has it")
	require.Equal(t, os.FileMode(0o755), mode("e"), "no layer has it")
	require.Equal(t, os.ModeSymlink|0o777, mode("s"), "not a directory in the layer: left alone")
	if root {
		fi, err := os.Lstat(filepath.Join(upper, "a"))
		require.NoError(t, err)
		st := fi.Sys().(*syscall.Stat_t)
		require.Equal(t, [2]uint32{1234, 5678}, [2]uint32{st.Uid, st.Gid})
	}
	if xattrs {
		buf := make([]byte, 16)
		n, err := unix.Lgetxattr(filepath.Join(upper, "a"), "user.shimd", buf)
		require.NoError(t, err)
		require.Equal(t, "kept", string(buf[:n]))
	}

	// One layer below: its view is a bind of its directory.
	sn = &viewSnapshotter{lowers: []string{bottom}}
	u.sn = sn
	require.NoError(t, u.inheritDirs(context.Background(), upper, []string{"/b"}, "parent"))
	require.Equal(t, os.FileMode(0o700), mode("b"))
}
