//go:build integration

package e2e

import (
	"archive/tar"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/opencontainers/image-spec/identity"
	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
)

// A pull extracts its layers at once where containerd's overlayfs can rebase
// (registry.unpack_layers 0: one per CPU, 3 to 6), or one by one, each on its parent
// (unpack_layers = 1); both give the image the same files, seen through an overlay
// view of its top snapshot as a container sees them: files a layer whites out gone,
// an opaque directory holding only its own layer's files, and a directory a layer's
// tar fills without an entry of its own keeping the mode and owner it has below
// (where there is none, 0755 and root's). Nothing but the image's snapshots is left.
func TestUnpackLayersAtOnceAsOneByOne(t *testing.T) {
	requireRoot(t)
	img := busyboxBase(t)
	dir := func(name string, mode int64, uid, gid int) tarEntry {
		return tarEntry{Name: name, Type: tar.TypeDir, Mode: mode, UID: uid, GID: gid}
	}
	file := func(name, data string) tarEntry {
		return tarEntry{Name: name, Type: tar.TypeReg, Mode: 0o644, Data: []byte(data)}
	}
	img.addLayer(t, dir("data/", 0o700, 1234, 5678), file("data/f1", "1\n"),
		dir("opq/", 0o755, 0, 0), file("opq/x", "x\n"), file("opq/y", "y\n"), file("etc/gone", "soon gone\n"),
		dir("keep/", 0o750, 42, 43), dir("keep/inner/", 0o711, 44, 45))
	img.addLayer(t, file("etc/.wh.gone", ""), file("data/f2", "2\n"),
		file("opq/.wh..wh..opq", ""), file("opq/z", "z\n"), file("new/deep/f", "deep\n"))
	img.addLayer(t, file("data/sub/f3", "3\n"), file("keep/inner/k", "k\n"), file("top", "top\n"))
	chain := identity.ChainID(img.Config.RootFS.DiffIDs).String()

	want := strings.Join([]string{
		"/data 700 1234 5678", "/data/f1", "/data/f2", "/data/sub 755 0 0", "/data/sub/f3",
		"/keep 750 42 43", "/keep/inner 711 44 45", "/keep/inner/k",
		"/new 755 0 0", "/new/deep 755 0 0", "/new/deep/f", "/opq 755 0 0", "/opq/z", "/top",
	}, "\n")
	// containerd 1.6's overlayfs cannot rebase: its pulls go one by one at any setting.
	atOnce := regexp.MustCompile(`at_once=([3-6])\b`)
	if harness.Tools().Legacy {
		atOnce = regexp.MustCompile(`at_once=(1)\b`)
	}
	for _, tc := range []struct {
		name         string
		unpackLayers string
		atOnce       *regexp.Regexp
	}{
		{"at once", "", atOnce},
		{"one by one", "unpack_layers = 1\n", regexp.MustCompile(`at_once=(1)\b`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hosts := t.TempDir()
			reg := harness.StartRegistry(t, harness.RegistryOptions{})
			reg.WriteHermeticHostsDir(t, hosts)
			cr := startCVERegistry(t, hosts, "", "")
			env := harness.New(t, harness.Options{Shimd: harness.ShimdOptions{
				ExtraConfig: fmt.Sprintf("[registry]\nconfig_path = %q\n%s", hosts, tc.unpackLayers),
			}})
			ref := cr.push(t, img, "layers", "v1")
			is := env.Shimd.Images(t)
			_, err := is.PullImage(ctxT(t, 2*time.Minute), &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
			require.NoError(t, err)
			logs, err := os.ReadFile(env.Shimd.LogPath())
			require.NoError(t, err)
			m := tc.atOnce.FindSubmatch(logs)
			require.NotNil(t, m, "shimd's log names no unpack of %s layers", tc.name)

			cl := env.Containerd.Client(t)
			require.Len(t, snapshotNames(t, cl), len(img.Layers), "the image's snapshots and nothing else")
			ctx := namespaces.WithNamespace(ctxT(t, time.Minute), env.Namespace)
			sn := cl.SnapshotService("overlayfs")
			mounts, err := sn.View(ctx, "unpack-view", chain)
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, sn.Remove(ctx, "unpack-view")) })
			root := t.TempDir()
			require.NoError(t, mount.All(mounts, root))
			t.Cleanup(func() { require.NoError(t, mount.UnmountAll(root, 0)) })

			var got []string
			for _, top := range []string{"data", "keep", "new", "opq", "top"} {
				require.NoError(t, filepath.Walk(filepath.Join(root, top), func(p string, fi os.FileInfo, err error) error {
					if err != nil {
						return err
					}
					line := strings.TrimPrefix(p, root)
					if fi.IsDir() {
						st := fi.Sys().(*syscall.Stat_t)
						line += fmt.Sprintf(" %o %d %d", fi.Mode().Perm(), st.Uid, st.Gid)
					}
					got = append(got, line)
					return nil
				}))
			}
			sort.Strings(got)
			require.Equal(t, want, strings.Join(got, "\n"), "the image's files (%s)", m[0])
			_, err = os.Lstat(filepath.Join(root, "etc/gone"))
			require.ErrorIs(t, err, os.ErrNotExist, "a whited-out file")
			_, err = os.Stat(filepath.Join(root, "bin/busybox"))
			require.NoError(t, err, "the base layer's files")
			t.Logf("%s: %s", tc.name, m[0])
		})
	}
}
