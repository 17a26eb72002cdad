//go:build integration

package harness_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/shimd/shimd/critest/harness"
)

// newNetns creates a network namespace bound to path (no "ip netns" name).
// The base dir cleanup unmounts it.
func newNetns(t *testing.T, path string) {
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, nil, 0o444))
	errc := make(chan error, 1)
	go func() {
		// The thread ends up in the new namespace; it is never unlocked, so
		// the runtime discards it when this goroutine returns.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- err
			return
		}
		self := fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid())
		errc <- unix.Mount(self, path, "", unix.MS_BIND, "")
	}()
	require.NoError(t, <-errc)
	t.Cleanup(func() { unix.Unmount(path, unix.MNT_DETACH) })
}

// listenIn opens a TCP listener inside the network namespace at path.
func listenIn(t *testing.T, path, addr string) net.Listener {
	type res struct {
		ln  net.Listener
		err error
	}
	c := make(chan res, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread is discarded
		f, err := os.Open(path)
		if err != nil {
			c <- res{err: err}
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			c <- res{err: err}
			return
		}
		ln, err := net.Listen("tcp", addr)
		c <- res{ln, err}
	}()
	r := <-c
	require.NoError(t, r.err)
	t.Cleanup(func() { r.ln.Close() })
	go func() {
		for {
			conn, err := r.ln.Accept()
			if err != nil {
				return
			}
			io.WriteString(conn, "hello from the pod\n")
			conn.Close()
		}
	}()
	return r.ln
}

func freePort(t *testing.T) int {
	p, err := harness.FreeTCPPort()
	require.NoError(t, err)
	return p
}

func dialRead(addr string) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, 3*time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(3 * time.Second))
	b, err := io.ReadAll(conn)
	return string(b), err
}

// addPod runs CNI ADD for a new netns with a hostPort on 127.0.0.1 and
// checks that the pod answers on its IP and on the hostPort.
func addPod(t *testing.T, base string, n *harness.CNINetwork) (*libcni.CNIConfig, *libcni.NetworkConfigList, *libcni.RuntimeConf) {
	nsPath := filepath.Join(base, "netns", "pod")
	newNetns(t, nsPath)
	cni := libcni.NewCNIConfigWithCacheDir([]string{harness.CNIBinDir}, filepath.Join(base, "cni-cache"), nil)
	list, err := libcni.ConfListFromFile(n.ConfPath)
	require.NoError(t, err)
	hostPort := freePort(t)
	rt := &libcni.RuntimeConf{
		ContainerID: fmt.Sprintf("harness-%d", time.Now().UnixNano()), NetNS: nsPath, IfName: "eth0",
		CapabilityArgs: map[string]any{"portMappings": []map[string]any{
			{"hostPort": hostPort, "containerPort": 8080, "protocol": "tcp", "hostIP": "127.0.0.1"},
		}},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := cni.AddNetworkList(ctx, list, rt)
	require.NoError(t, err)
	res, err := types100.NewResultFromResult(r)
	require.NoError(t, err)
	require.NotEmpty(t, res.IPs)
	podIP := res.IPs[0].Address.IP
	require.True(t, n.Subnet.Contains(podIP), "pod IP %s outside %s", podIP, n.Subnet)
	t.Logf("pod IP %s, hostPort 127.0.0.1:%d -> 8080", podIP, hostPort)

	listenIn(t, nsPath, ":8080")
	got, err := dialRead(net.JoinHostPort(podIP.String(), "8080"))
	require.NoError(t, err, "pod IP")
	require.Contains(t, got, "hello")
	got, err = dialRead(fmt.Sprintf("127.0.0.1:%d", hostPort))
	require.NoError(t, err, "hostPort on 127.0.0.1")
	require.Contains(t, got, "hello")

	leaks := strings.Join(harness.FindLeaks(ctx, harness.LeakCheck{CNI: n}), "\n")
	require.Contains(t, leaks, "IPAM lease "+podIP.String())
	require.Contains(t, leaks, "iptables nat")
	return cni, list, rt
}

// TestCNINetwork runs the plugins on the harness network: ADD, traffic to
// the pod IP and to a hostPort on 127.0.0.1, DEL, no leaks. Then an ADD
// without DEL, whose leftovers the harness cleanup must remove.
func TestCNINetwork(t *testing.T) {
	requireRoot(t)
	t.Run("add-del", func(t *testing.T) {
		base := harness.NewBaseDir(t)
		n := harness.WriteCNIConfig(t, filepath.Join(base, "net.d"), harness.CNIOptions{})
		cni, list, rt := addPod(t, base, n)
		require.NoError(t, cni.DelNetworkList(context.Background(), list, rt))
		harness.AssertNoLeaks(t, harness.LeakCheck{CNI: n, Timeout: 5 * time.Second})
	})
	var subnet string
	t.Run("leaky", func(t *testing.T) {
		base := harness.NewBaseDir(t)
		n := harness.WriteCNIConfig(t, filepath.Join(base, "net.d"), harness.CNIOptions{})
		subnet = strings.TrimSuffix(n.Subnet.IP.String(), "0")
		addPod(t, base, n)
	})
	out, err := exec.Command("iptables", "-t", "nat", "-S").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.NotContains(t, string(out), subnet, "nat rules for the leaky pod's subnet remain")
}
