//go:build integration

package e2e

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shimd/shimd/critest/harness"
)

// A pod that gets the address of a pod removed moments before answers the host at
// once. The host still has a neighbour entry with the removed pod's MAC (the test
// talked to that pod a few seconds ago); the bridge plugin's own
// announcement is lost (its arp_notify fires before the bridge port forwards), so
// without shimd's announcement after CNI ADD (network/announce.go) the host's
// packets go to the old MAC for 8 to 45 s.
func TestReusedPodAddressAnswersAtOnce(t *testing.T) {
	requireRoot(t)
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		t.Skip("busybox-static is needed (hack/tools.sh debs)")
	}
	// A /29 gives host-local five addresses (.2 to .6), so that one comes back soon.
	subnet := fmt.Sprintf("198.19.%d.%d/29", 200+rand.IntN(56), 8*rand.IntN(32))
	env := harness.New(t, harness.Options{CNI: harness.CNIOptions{Subnet: subnet}})
	rs := env.Shimd.Runtime(t)
	www := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(www, "index.html"), []byte("hello\n"), 0o644))
	serve := func(id string) {
		srv := exec.Command("nsenter", "--net="+filepath.Join(env.Shimd.NetnsDir(), id), busybox, "httpd", "-f", "-p", "8080", "-h", www)
		require.NoError(t, srv.Start())
		t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })
	}

	// The bridge keeps its MAC address, as the bridge plugin since v1.10 makes it do.
	// Otherwise the bridge takes the lowest MAC of its ports, and each change of it
	// flushes the bridge's neighbour entries, stale ones included: whether a stale
	// entry survives until its address comes back is then left to chance.
	br, err := net.InterfaceByName(env.CNI.Bridge)
	require.NoError(t, err)
	out, err := exec.Command("ip", "link", "set", "dev", env.CNI.Bridge, "address", br.HardwareAddr.String()).CombinedOutput()
	require.NoError(t, err, "%s", out)
	// A pod that stays: the bridge keeps a port up, and with it its neighbour
	// entries (a bridge without ports loses its carrier, which flushes them).
	keeper := runPod(t, rs, podConfig("keeper"))
	defer stopRemove(t, rs, keeper)

	first := runPod(t, rs, podConfig("first"))
	ip := podStatus(t, rs, first).Network.Ip
	serve(first)
	require.Equal(t, "hello\n", httpGet(t, "http://"+net.JoinHostPort(ip, "8080")+"/index.html"))
	t.Logf("first pod %s at %s; host: %s", first, ip, neighbour(ip))
	stopRemove(t, rs, first)

	// Pods come and go until host-local hands the address out again.
	var again string
	for i := 0; i < 8 && again == ""; i++ {
		id := runPod(t, rs, podConfig(fmt.Sprintf("next-%d", i)))
		if podStatus(t, rs, id).Network.Ip == ip {
			again = id
			break
		}
		stopRemove(t, rs, id)
	}
	if again == "" {
		t.Fatalf("host-local never gave %s out again in %s", ip, subnet)
	}
	defer stopRemove(t, rs, again)
	t.Logf("pod %s got %s again; host: %s", again, ip, neighbour(ip))
	serve(again)

	// busybox httpd listens within milliseconds; a stale neighbour costs seconds.
	start := time.Now()
	var last error
	for time.Since(start) < 3*time.Second {
		c, err := net.DialTimeout("tcp", net.JoinHostPort(ip, "8080"), time.Second)
		if err == nil {
			c.Close()
			t.Logf("connected after %s; host: %s", time.Since(start).Round(time.Millisecond), neighbour(ip))
			return
		}
		last = err
		time.Sleep(50 * time.Millisecond)
	}
	harness.Fatalf(t, "the pod on the reused address %s does not answer the host after 3 s (%v); host: %s", ip, last, neighbour(ip))
}

// neighbour is the host's neighbour entry for ip ("ip neigh show").
func neighbour(ip string) string {
	out, err := exec.Command("ip", "neigh", "show", ip).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("ip neigh: %v", err)
	}
	if s := strings.TrimSpace(string(out)); s != "" {
		return s
	}
	return "no entry"
}
