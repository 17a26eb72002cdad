//go:build integration

package harness_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	runcoptions "github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
)

func TestMain(m *testing.M) { harness.Main(m) }

func requireRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
}

// TestContainerdRestart starts a private containerd, checks its version,
// restarts it, checks again, and runs the leak check on the empty namespace.
func TestContainerdRestart(t *testing.T) {
	requireRoot(t)
	cd := harness.StartContainerd(t, harness.ContainerdOptions{})
	tools := harness.Tools()
	want := "2."
	if tools.Legacy {
		want = "1.6"
	}

	check := func() string {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		v, err := cd.Client(t).Version(ctx)
		require.NoError(t, err)
		require.Contains(t, strings.TrimPrefix(v.Version, "v"), want)
		return v.Version
	}
	v1 := check()
	pid1 := cd.PID()
	t.Logf("containerd %s (pid %d) on %s", v1, pid1, cd.Address())

	cd.Restart(t)
	v2 := check()
	require.NotEqual(t, pid1, cd.PID(), "restart must start a new process")
	require.Equal(t, v1, v2)
	t.Logf("after restart: containerd %s (pid %d)", v2, cd.PID())

	harness.AssertNoLeaks(t, harness.LeakCheck{Containerd: cd, Timeout: 5 * time.Second})
}

// TestCNIConfig writes a network and checks the bridge, subnet and sysctl;
// the cleanup removes the bridge.
func TestCNIConfig(t *testing.T) {
	requireRoot(t)
	dir := harness.NewBaseDir(t)
	n := harness.WriteCNIConfig(t, dir+"/net.d", harness.CNIOptions{})
	t.Logf("network %s: bridge %s subnet %s conf %s", n.Name, n.Bridge, n.Subnet, n.ConfPath)

	_, rng, _ := net.ParseCIDR("198.18.0.0/15")
	require.True(t, rng.Contains(n.Subnet.IP), "subnet %s outside 198.18.0.0/15", n.Subnet)
	ifc, err := net.InterfaceByName(n.Bridge)
	require.NoError(t, err)
	addrs, err := ifc.Addrs()
	require.NoError(t, err)
	var got []string
	for _, a := range addrs {
		got = append(got, a.String())
	}
	require.Contains(t, got, n.Gateway.String()+"/24")
	b, err := os.ReadFile("/proc/sys/net/ipv4/conf/all/route_localnet")
	require.NoError(t, err)
	require.Equal(t, "1", strings.TrimSpace(string(b)))
	conf, err := os.ReadFile(n.ConfPath)
	require.NoError(t, err)
	require.Contains(t, string(conf), n.DataDir)

	harness.AssertNoLeaks(t, harness.LeakCheck{CNI: n, MountRoots: []string{dir}, Timeout: time.Second})
}

// TestCNIConfigCleanup checks that a network's bridge is gone after its test.
func TestCNIConfigCleanup(t *testing.T) {
	requireRoot(t)
	var bridge string
	t.Run("inner", func(t *testing.T) {
		n := harness.WriteCNIConfig(t, harness.NewBaseDir(t)+"/net.d", harness.CNIOptions{})
		bridge = n.Bridge
	})
	_, err := net.InterfaceByName(bridge)
	require.Error(t, err, "bridge %s still exists", bridge)
	out, _ := exec.Command("ip", "-br", "link").CombinedOutput()
	require.NotContains(t, string(out), bridge)
}

// TestLeakCheckSeesTask runs a busybox task from a plain rootfs directory (no
// image needed) and checks that FindLeaks reports its container, its shim and
// the workload, and that the harness cleanup removes them.
func TestLeakCheckSeesTask(t *testing.T) {
	requireRoot(t)
	tools := harness.Tools()
	if _, err := os.Stat(tools.Runc); err != nil {
		t.Skipf("no runc at %s", tools.Runc)
	}
	if _, err := os.Stat("/bin/busybox"); err != nil {
		t.Skip("no static busybox")
	}
	var addr string
	t.Run("leaky", func(t *testing.T) {
		cd := harness.StartContainerd(t, harness.ContainerdOptions{})
		addr = cd.Address()
		cl := cd.Client(t)
		ctx, cancel := context.WithTimeout(namespaces.WithNamespace(context.Background(), cd.Namespace()), time.Minute)
		defer cancel()

		rootfs := cd.Dir() + "/rootfs"
		require.NoError(t, os.MkdirAll(rootfs+"/bin", 0o755))
		require.NoError(t, exec.Command("cp", "/bin/busybox", rootfs+"/bin/busybox").Run())
		// A unique id and a private runc root: the shim's default runc root,
		// /run/containerd/runc/<namespace>, is shared by all daemons.
		id := fmt.Sprintf("leaky-%d", time.Now().UnixNano())
		ctr, err := cl.NewContainer(ctx, id,
			client.WithRuntime("io.containerd.runc.v2", &runcoptions.Options{BinaryName: tools.Runc, Root: cd.Dir() + "/runc"}),
			client.WithNewSpec(oci.WithRootFSPath(rootfs), oci.WithProcessArgs("/bin/busybox", "sleep", "300")))
		require.NoError(t, err)
		task, err := ctr.NewTask(ctx, cio.NullIO)
		require.NoError(t, err)
		require.NoError(t, task.Start(ctx))

		leaks := strings.Join(harness.FindLeaks(ctx, harness.LeakCheck{Containerd: cd}), "\n")
		t.Logf("leaks found (expected):\n%s", leaks)
		require.Contains(t, leaks, "containerd container "+cd.Namespace()+"/"+id)
		require.Contains(t, leaks, "cgroup /sys/fs/cgroup/memory/"+cd.Namespace()+"/"+id)
		require.Contains(t, leaks, "containerd-shim-runc-v2")
		require.Contains(t, leaks, "sleep 300")
		// No AssertNoLeaks here: the harness cleanup must delete the task.
	})
	out, err := exec.Command("sh", "-c", "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '").Output()
	require.NoError(t, err)
	require.NotContains(t, string(out), addr, "a process still names %s", addr)
}

// TestContainerdCRI starts containerd with its own CRI plugin (as benchmarks
// do), through New without shimd, and checks that CRI answers and sees the
// harness network.
func TestContainerdCRI(t *testing.T) {
	requireRoot(t)
	env := harness.New(t, harness.Options{NoShimd: true, Containerd: harness.ContainerdOptions{WithCRI: true}})
	require.Equal(t, "k8s.io", env.Namespace)
	conn, err := grpc.NewClient("unix://"+env.Containerd.Address(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	rt := runtimeapi.NewRuntimeServiceClient(conn)

	var st *runtimeapi.StatusResponse
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, err = rt.Status(ctx, &runtimeapi.StatusRequest{Verbose: true})
		if err != nil {
			return false
		}
		ready := 0
		for _, c := range st.Status.Conditions {
			// containerd 2.x also reports a cgroup v1 deprecation here.
			if (c.Type == runtimeapi.RuntimeReady || c.Type == runtimeapi.NetworkReady) && c.Status {
				ready++
			}
		}
		return ready == 2
	}, 20*time.Second, 200*time.Millisecond, "CRI runtime and network not ready")
	v, err := rt.Version(context.Background(), &runtimeapi.VersionRequest{})
	require.NoError(t, err)
	t.Logf("CRI %s %s, conditions %v", v.RuntimeName, v.RuntimeVersion, st.Status.Conditions)
	require.Contains(t, st.Info["config"], env.CNI.ConfPath[:strings.LastIndex(env.CNI.ConfPath, "/")])
	require.Contains(t, st.Info["config"], env.Tools.Runc)
}

// TestBaseDirOnItsOwnExt4: with SHIMD_TEST_FS=ext4 a base directory is a journaled
// ext4 of its own (jbd2 names its journal), the leak check does not count that
// mount, and when the test ends the mount, the directory and the image file go.
func TestBaseDirOnItsOwnExt4(t *testing.T) {
	requireRoot(t)
	var dir string
	imgsBefore, err := filepath.Glob("/var/tmp/shimd-testfs-*.img")
	require.NoError(t, err)
	t.Run("inner", func(t *testing.T) {
		t.Setenv(harness.TestFSEnv, "ext4")
		t.Setenv(harness.TestFSSizeEnv, "1G")
		dir = harness.NewBaseDir(t)
		points, err := harness.MountPointsUnder(dir)
		require.NoError(t, err)
		require.Equal(t, []string{dir}, points, "the base directory is the mount point")
		bare, err := harness.JournallessExt4(dir)
		require.NoError(t, err)
		require.False(t, bare, "the base directory's ext4 has a journal")
		require.NoError(t, os.WriteFile(dir+"/f", []byte("x"), 0o644))
		harness.AssertNoLeaks(t, harness.LeakCheck{MountRoots: []string{dir}, Timeout: time.Second})
	})
	points, err := harness.MountPointsUnder(dir)
	require.NoError(t, err)
	require.Empty(t, points, "unmounted")
	_, err = os.Stat(dir)
	require.True(t, os.IsNotExist(err), "removed: %v", err)
	imgsAfter, err := filepath.Glob("/var/tmp/shimd-testfs-*.img")
	require.NoError(t, err)
	require.ElementsMatch(t, imgsBefore, imgsAfter, "the image file removed")
}
