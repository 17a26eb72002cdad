//go:build integration

// Run as root: go test -tags integration ./sandbox/pause/ -v
//
// Each subtest starts a throwaway containerd (Debian's 1.6, and 2.4 if
// hack/tools.sh built it) on a private root, state and socket under a short
// /tmp dir, imports the built-in image, runs it with runc, and stops
// everything it started, by PID, before removing the dir.
package pause

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/errdefs"
	"github.com/moby/sys/mountinfo"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"
)

const toolsBin = "/var/cache/shimd/tools/bin"

// daemon is one containerd to test against.
type daemon struct {
	name, bin, runc string
	path            string // PATH of the containerd process: where it finds its shim
	config          string // fmt format with root, state, address, ttrpc address
}

const configV2 = `version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = %q
[ttrpc]
  address = %q
`

const configV3 = `version = 3
root = %q
state = %q
imports = []
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime",
  "io.containerd.cri.v1.images", "io.containerd.nri.v1.nri"]
[grpc]
  address = %q
[ttrpc]
  address = %q
`

func daemons() []daemon {
	ds := []daemon{{
		name: "containerd-1.6", bin: "/usr/bin/containerd", runc: "/usr/sbin/runc",
		path: "/usr/sbin:/usr/bin:/sbin:/bin", config: configV2,
	}}
	if _, err := os.Stat(filepath.Join(toolsBin, "containerd")); err == nil {
		runc := filepath.Join(toolsBin, "runc")
		if _, err := os.Stat(runc); err != nil {
			runc = "/usr/sbin/runc"
		}
		ds = append(ds, daemon{
			name: "containerd-2.4", bin: filepath.Join(toolsBin, "containerd"), runc: runc,
			path: toolsBin + ":/usr/sbin:/usr/bin:/sbin:/bin", config: configV3,
		})
	}
	return ds
}

func TestIntegration(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	for _, d := range daemons() {
		t.Run(d.name, func(t *testing.T) { testDaemon(t, d) })
	}
}

func testDaemon(t *testing.T, d daemon) {
	if _, err := os.Stat(d.bin); err != nil {
		t.Skipf("%s: %v", d.bin, err)
	}
	dir, err := os.MkdirTemp("/tmp", "sp-")
	require.NoError(t, err)
	t.Cleanup(func() { removeDir(t, dir) }) // runs last: after containerd stopped
	c := startContainerd(t, d, dir)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ctx = namespaces.WithNamespace(ctx, "shimd-pause-test")
	want := Build()

	// Import, then hit the cache, then the containerd-side check.
	imp := NewImporter(c)
	start := time.Now()
	img, err := imp.Ensure(ctx, "overlayfs")
	require.NoError(t, err)
	t.Logf("first Ensure (import + unpack): %v", time.Since(start))
	start = time.Now()
	img2, err := imp.Ensure(ctx, "overlayfs")
	require.NoError(t, err)
	t.Logf("second Ensure (cached): %v", time.Since(start))
	start = time.Now()
	img3, err := Ensure(ctx, c, "overlayfs")
	require.NoError(t, err)
	t.Logf("package Ensure (already present): %v", time.Since(start))
	for _, i := range []client.Image{img, img2, img3} {
		require.Equal(t, Ref, i.Name())
		require.Equal(t, want.Manifest.Desc.Digest, i.Target().Digest)
		require.Equal(t, PinnedValue, i.Labels()[PinnedLabel])
	}
	rec, err := c.ImageService().Get(ctx, Ref)
	require.NoError(t, err)
	require.Equal(t, want.Manifest.Desc, rec.Target)
	info, err := c.ContentStore().Info(ctx, want.Manifest.Desc.Digest)
	require.NoError(t, err)
	require.Equal(t, want.Config.Desc.Digest.String(), info.Labels[gcRefConfig])
	require.Equal(t, want.Layer.Desc.Digest.String(), info.Labels[gcRefLayer0])
	unpacked, err := img.IsUnpacked(ctx, "overlayfs")
	require.NoError(t, err)
	require.True(t, unpacked)

	// Removed behind our back: Forget, and Ensure imports again, once for
	// several concurrent callers.
	require.NoError(t, c.ImageService().Delete(ctx, Ref))
	imp.Forget()
	imgs := make([]client.Image, 4)
	var g errgroup.Group
	for n := range imgs {
		g.Go(func() (err error) { imgs[n], err = imp.Ensure(ctx, "overlayfs"); return err })
	}
	require.NoError(t, g.Wait())
	for _, i := range imgs {
		require.Equal(t, want.Manifest.Desc.Digest, i.Target().Digest)
	}
	img = imgs[0]

	runPause(ctx, t, c, d, img, dir)
}

// runPause runs the image as a container with runc, checks that it runs,
// and that SIGTERM makes it exit 0 without printing anything.
func runPause(ctx context.Context, t *testing.T, c *client.Client, d daemon, img client.Image, dir string) {
	const id = "pause-test"
	ctr, err := c.NewContainer(ctx, id,
		client.WithSnapshotter("overlayfs"),
		client.WithNewSnapshot(id, img),
		client.WithRuntime("io.containerd.runc.v2", &options.Options{
			BinaryName: d.runc, Root: filepath.Join(dir, "runc"),
		}),
		// A one-level cgroup path: runc removes it on delete, where the
		// default /<namespace>/<id> would leave the namespace level behind.
		client.WithNewSpec(oci.WithImageConfig(img), oci.WithCgroup("/"+filepath.Base(dir))),
	)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx := context.WithoutCancel(ctx)
		if err := ctr.Delete(ctx, client.WithSnapshotCleanup); err != nil {
			t.Errorf("delete container: %v", err)
		}
	})

	var stdout, stderr bytes.Buffer
	task, err := ctr.NewTask(ctx, cio.NewCreator(cio.WithStreams(nil, &stdout, &stderr),
		cio.WithFIFODir(filepath.Join(dir, "fifo"))))
	require.NoError(t, err)
	t.Cleanup(func() { // registered after the container's: runs before it
		ctx := context.WithoutCancel(ctx)
		_, err := task.Delete(ctx, client.WithProcessKill)
		if err != nil && !errdefs.IsNotFound(err) {
			t.Errorf("delete task: %v", err)
		}
	})
	exitCh, err := task.Wait(ctx)
	require.NoError(t, err)
	require.NoError(t, task.Start(ctx))

	// Running, and stays so.
	time.Sleep(300 * time.Millisecond)
	st, err := task.Status(ctx)
	require.NoError(t, err)
	require.Equal(t, client.Running, st.Status)
	t.Logf("pause runs as pid %d under %s", task.Pid(), d.runc)

	require.NoError(t, task.Kill(ctx, syscall.SIGTERM))
	select {
	case es := <-exitCh:
		code, _, err := es.Result()
		require.NoError(t, err)
		require.Zero(t, code, "exit status after SIGTERM")
	case <-time.After(10 * time.Second):
		t.Fatal("pause did not exit on SIGTERM")
	}
	_, err = task.Delete(ctx) // waits for the IO to drain
	require.NoError(t, err)
	require.Empty(t, stdout.String())
	require.Empty(t, stderr.String())
}

// startContainerd starts d on private paths under dir and returns a client.
// Cleanup closes the client and stops that containerd, by PID.
func startContainerd(t *testing.T, d daemon, dir string) *client.Client {
	t.Helper()
	sock := filepath.Join(dir, "c.sock")
	cfg := filepath.Join(dir, "config.toml")
	require.NoError(t, os.WriteFile(cfg, fmt.Appendf(nil, d.config,
		filepath.Join(dir, "root"), filepath.Join(dir, "state"), sock, sock+".ttrpc"), 0o644))
	logf, err := os.Create(filepath.Join(dir, "containerd.log"))
	require.NoError(t, err)
	defer logf.Close()

	cmd := exec.Command(d.bin, "--config", cfg, "--log-level", "info")
	cmd.Env = []string{"PATH=" + d.path}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { stopProcess(t, cmd, filepath.Join(dir, "containerd.log")) })

	var c *client.Client
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err = os.Stat(sock); err == nil {
			if c, err = client.New(sock, client.WithTimeout(2*time.Second)); err == nil {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				var v client.Version
				v, err = c.Version(ctx)
				cancel()
				if err == nil {
					t.Logf("%s %s (pid %d) on %s", d.bin, v.Version, cmd.Process.Pid, sock)
					break
				}
				c.Close()
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("containerd did not come up: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Cleanup(func() { c.Close() }) // runs before stopProcess
	return c
}

// stopProcess sends SIGTERM to the process we started, then SIGKILL if it
// has not exited within 10s, and reaps it.
func stopProcess(t *testing.T, cmd *exec.Cmd, logPath string) {
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Errorf("containerd pid %d ignored SIGTERM; killing it", cmd.Process.Pid)
		_ = cmd.Process.Kill()
		<-done
	}
	if t.Failed() {
		if b, err := os.ReadFile(logPath); err == nil {
			t.Logf("containerd log:\n%s", b)
		}
	}
}

// removeDir unmounts whatever is still mounted under dir, deepest first,
// and removes it.
func removeDir(t *testing.T, dir string) {
	mounts, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
	if err != nil {
		t.Errorf("read mountinfo: %v", err)
	}
	sort.Slice(mounts, func(i, j int) bool { return len(mounts[i].Mountpoint) > len(mounts[j].Mountpoint) })
	for _, m := range mounts {
		t.Errorf("left mounted: %s", m.Mountpoint)
		if err := unix.Unmount(m.Mountpoint, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", m.Mountpoint, err)
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Errorf("remove %s: %v", dir, err)
	}
}
