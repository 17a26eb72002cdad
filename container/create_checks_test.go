package container

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestCheckHostPaths(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	loop := filepath.Join(dir, "loop")
	require.NoError(t, os.Symlink(loop, loop))
	dangling := filepath.Join(dir, "dangling")
	require.NoError(t, os.Symlink(filepath.Join(dir, "gone"), dangling))
	for _, tt := range []struct {
		name, host string
		want       error // nil: accepted
		made       bool  // accepted by making it a directory (unless rejecting)
	}{
		{"directory", dir, nil, false},
		{"file", file, nil, false},
		{"device", "/dev/null", nil, false},
		{"image volume", "", nil, false},
		{"missing", filepath.Join(dir, "missing"), nil, true},
		{"missing, parents too", filepath.Join(dir, "a", "b", "c"), nil, true},
		{"under a file", file + "/x", errdefs.ErrNotFound, false},
		{"dangling symlink", dangling, errdefs.ErrNotFound, false},
		{"symlink loop", loop, errdefs.ErrInvalidArgument, false},
		{"name too long", "/" + strings.Repeat("a", 300), errdefs.ErrInvalidArgument, false},
	} {
		for _, reject := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s, reject=%v", tt.name, reject), func(t *testing.T) {
				if tt.made {
					require.NoError(t, os.RemoveAll(filepath.Join(dir, "missing")))
					require.NoError(t, os.RemoveAll(filepath.Join(dir, "a")))
				}
				cfg := &runtimeapi.ContainerConfig{Mounts: []*runtimeapi.Mount{{HostPath: dir, ContainerPath: "/a"}, {HostPath: tt.host, ContainerPath: "/b"}}}
				err := checkHostPaths(cfg, reject)
				want := tt.want
				if tt.made && reject {
					want = errdefs.ErrNotFound
				}
				if want == nil {
					require.NoError(t, err)
					if tt.made {
						fi, err := os.Stat(tt.host)
						require.NoError(t, err)
						require.True(t, fi.IsDir())
						require.Equal(t, os.FileMode(0o755), fi.Mode().Perm())
					}
					return
				}
				require.ErrorIs(t, err, want)
				require.ErrorContains(t, err, "config.mounts[1].host_path")
				if tt.made {
					require.NoDirExists(t, tt.host, "rejected, yet made")
				}
			})
		}
	}
	// A dangling symlink is not followed to make its target.
	require.NoFileExists(t, filepath.Join(dir, "gone"))
}

// TestTreePaths builds an image rootfs and a host volume in temp dirs and judges
// working directories and masked paths against them as runc would find them.
func TestTreePaths(t *testing.T) {
	root := t.TempDir() // the image
	for _, d := range []string{"bin", "etc", "usr/bin", "data", "tmp"} {
		require.NoError(t, os.MkdirAll(filepath.Join(root, d), 0o755))
	}
	for _, f := range []string{"etc/passwd", "usr/bin/env"} {
		require.NoError(t, os.WriteFile(filepath.Join(root, f), nil, 0o644))
	}
	require.NoError(t, os.Symlink("/usr/bin/env", filepath.Join(root, "bin/env")))       // absolute, to a file
	require.NoError(t, os.Symlink("../usr/bin", filepath.Join(root, "bin/usrbin")))      // relative, to a dir
	require.NoError(t, os.Symlink("/../../../etc", filepath.Join(root, "escape")))       // cannot leave the root
	require.NoError(t, os.Symlink("loop", filepath.Join(root, "loop")))                  // a loop
	require.NoError(t, os.Symlink("passwd/..", filepath.Join(root, "etc/through-file"))) // ENOTDIR in the kernel
	vol := t.TempDir()                                                                   // a host volume at /data
	require.NoError(t, os.WriteFile(filepath.Join(vol, "f"), nil, 0o644))
	hostFile := filepath.Join(vol, "f")

	s := &specs.Spec{
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs"},
			{Destination: "/dev/shm", Type: "bind", Source: t.TempDir(), Options: []string{"rbind"}},
			{Destination: "/data", Type: "bind", Source: vol, Options: []string{"rbind", "rw"}},
			{Destination: "/etc/hosts", Type: "bind", Source: hostFile, Options: []string{"rbind"}},
		},
		Linux: &specs.Linux{Devices: []specs.LinuxDevice{{Path: "/dev/gpu0"}}},
	}
	for _, tt := range []struct {
		name    string
		wd      string
		imageWD string // the image config's WorkingDir
		masked  string
		invalid bool
		inImage bool // left for the rootfs walk (and passing it unless invalid)
	}{
		{name: "image wd a directory", imageWD: "/usr/bin", inImage: true},
		{name: "image wd missing", imageWD: "/srv/app", inImage: true},
		{name: "image wd a file", imageWD: "/etc/passwd", inImage: true, invalid: true},
		{name: "image wd a host file mount", imageWD: "/etc/hosts", invalid: true},
		{name: "request wd wins over the image's", wd: "/usr/bin", imageWD: "/etc/passwd", inImage: true},
		{name: "wd missing", wd: "/work/dir", inImage: true},
		{name: "wd a directory", wd: "/usr/bin", inImage: true},
		{name: "wd a file", wd: "/etc/passwd", inImage: true, invalid: true},
		{name: "wd under a file", wd: "/etc/passwd/x/y", inImage: true, invalid: true},
		{name: "wd a symlink to a file", wd: "/bin/env", inImage: true, invalid: true},
		{name: "wd through a symlink to a dir", wd: "/bin/usrbin/sub", inImage: true},
		{name: "wd through a symlink to a file", wd: "/bin/env/x", inImage: true, invalid: true},
		{name: "wd symlink escaping stays in root", wd: "/escape", inImage: true},
		{name: "wd symlink loop", wd: "/loop/x", inImage: true, invalid: true},
		{name: "wd symlink through a file", wd: "/etc/through-file", inImage: true, invalid: true},
		{name: "wd with dot-dot at root", wd: "/tmp/../../", inImage: true},
		{name: "wd root", wd: "/", inImage: true},
		{name: "wd a device node", wd: "/dev/zero", invalid: true},
		{name: "wd a config device", wd: "/dev/gpu0/x", invalid: true},
		{name: "wd in dev", wd: "/dev/fd"},
		{name: "wd in proc", wd: "/proc/self/status"},
		{name: "wd a host file mount", wd: "/etc/hosts", invalid: true},
		{name: "wd a host volume", wd: "/data"},
		{name: "wd a file in a host volume", wd: "/data/f", invalid: true},
		{name: "wd missing in a host volume", wd: "/data/new/dir"},
		{name: "wd in shm", wd: "/dev/shm/x"},
		{name: "masked a file", masked: "/etc/passwd", inImage: true},
		{name: "masked under a file", masked: "/etc/passwd/x", inImage: true, invalid: true},
		{name: "masked missing", masked: "/nope/x", inImage: true},
		{name: "masked a device", masked: "/dev/zero"},
		{name: "masked under a device", masked: "/dev/zero/x", invalid: true},
		{name: "masked a host file", masked: "/etc/hosts"},
		{name: "masked under a host file", masked: "/etc/hosts/x", invalid: true},
		{name: "masked in proc", masked: "/proc/kcore"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := &runtimeapi.ContainerConfig{WorkingDir: tt.wd, Linux: &runtimeapi.LinuxContainerConfig{
				SecurityContext: &runtimeapi.LinuxContainerSecurityContext{}}}
			field := "config.working_dir"
			if tt.masked != "" {
				cfg.Linux.SecurityContext.MaskedPaths = []string{"/proc/kcore", tt.masked}
				field = "config.linux.security_context.masked_paths[1]"
			}
			inImage, err := treePathsOutsideImage(cfg, tt.imageWD, s)
			if err == nil {
				require.Equal(t, tt.inImage, len(inImage) > 0, "%v", inImage)
				err = checkInImage(root, inImage)
			}
			if !tt.invalid {
				require.NoError(t, err)
				return
			}
			if tt.wd == "" && tt.imageWD != "" {
				// Not the request's fault: the image's own working directory.
				require.ErrorIs(t, err, errdefs.ErrFailedPrecondition)
				require.ErrorContains(t, err, "image.working_dir")
				return
			}
			require.ErrorIs(t, err, errdefs.ErrInvalidArgument)
			require.ErrorContains(t, err, field)
		})
	}
}

func TestMayNeedRootfs(t *testing.T) {
	kubelet := &runtimeapi.ContainerConfig{Linux: &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
		MaskedPaths:   []string{"/proc/acpi", "/proc/kcore", "/sys/firmware", "/sys/devices/virtual/powercap"},
		ReadonlyPaths: []string{"/proc/bus", "/proc/sys", "/proc/sysrq-trigger"}}}}
	m := &Manager{}
	require.False(t, m.treesOK.mayNeedRootfs("c1", kubelet, ""), "the kubelet's default lists")
	require.False(t, m.treesOK.mayNeedRootfs("c1", &runtimeapi.ContainerConfig{}, ""))
	app := &runtimeapi.ContainerConfig{WorkingDir: "/app/./"}
	require.True(t, m.treesOK.mayNeedRootfs("c1", app, ""))
	m.treesOK.add("c1", []treePath{{path: "/app"}})
	require.False(t, m.treesOK.mayNeedRootfs("c1", app, ""), "found sound in this image before")
	require.True(t, m.treesOK.mayNeedRootfs("c2", app, ""), "another image")
	kubelet.Linux.SecurityContext.MaskedPaths = append(kubelet.Linux.SecurityContext.MaskedPaths, "/etc/secret")
	require.True(t, m.treesOK.mayNeedRootfs("c1", kubelet, ""))
	require.True(t, m.treesOK.mayNeedRootfs("c1", &runtimeapi.ContainerConfig{}, "/srv"), "the image's working dir")
	require.False(t, m.treesOK.mayNeedRootfs("c1", &runtimeapi.ContainerConfig{}, "/app"), "the image's, found sound before")
}

// FuzzTreePaths: any working directory or masked path is judged against an image
// rootfs with symlinks (loops, escapes, links through files) without a panic or a
// hang, and refused only as InvalidArgument.
func FuzzTreePaths(f *testing.F) {
	root := f.TempDir()
	require.NoError(f, os.MkdirAll(filepath.Join(root, "usr/bin"), 0o755))
	require.NoError(f, os.WriteFile(filepath.Join(root, "usr/bin/env"), nil, 0o644))
	for link, target := range map[string]string{"bin": "usr/bin", "env": "/usr/bin/env", "loop": "loop", "up": "../../..",
		"through": "usr/bin/env/..", "abs": "/"} {
		require.NoError(f, os.Symlink(target, filepath.Join(root, link)))
	}
	s := &specs.Spec{Mounts: []specs.Mount{{Destination: "/proc", Type: "proc"}, {Destination: "/dev", Type: "tmpfs"},
		{Destination: "/vol", Type: "bind", Source: root, Options: []string{"rbind"}}}}
	for _, seed := range []string{"/", "/bin/env", "/env/x", "/loop", "/up/up/usr/bin", "/through", "/abs/abs/bin/x",
		"/dev/null/x", "/vol/env", "/proc/self", "//..//./usr/bin/", "/usr/bin/env/../env"} {
		f.Add(seed, false)
		f.Add(seed, true)
	}
	f.Fuzz(func(t *testing.T, p string, masked bool) {
		if !strings.HasPrefix(p, "/") || strings.ContainsRune(p, 0) || len(p) > 4095 {
			return // refused by the request validators first
		}
		cfg := &runtimeapi.ContainerConfig{Linux: &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{}}}
		if masked {
			cfg.Linux.SecurityContext.MaskedPaths = []string{p}
		} else {
			cfg.WorkingDir = p
		}
		inImage, err := treePathsOutsideImage(cfg, "", s)
		if err == nil {
			err = checkInImage(root, inImage)
		}
		if err != nil && !errdefs.IsInvalidArgument(err) {
			t.Fatalf("%q: not InvalidArgument: %v", p, err)
		}
	})
}
