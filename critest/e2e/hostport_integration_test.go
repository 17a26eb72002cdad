//go:build integration

package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
)

// A hostPort reaches the pod on 127.0.0.1 and on the pod IP; after StopPodSandbox the
// mapping is gone. The server in the pod is busybox httpd entered into the pod's netns.
func TestHostPort(t *testing.T) {
	requireRoot(t)
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		t.Skip("busybox-static is needed (hack/tools.sh debs)")
	}
	env := harness.New(t, harness.Options{})
	rs := env.Shimd.Runtime(t)
	hostPort := freePort(t)
	cfg := podConfig("hostport")
	cfg.PortMappings = []*runtimeapi.PortMapping{{Protocol: runtimeapi.Protocol_TCP, ContainerPort: 8080, HostPort: int32(hostPort)}}
	id := runPod(t, rs, cfg)
	ip := podStatus(t, rs, id).Network.Ip

	www := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(www, "index.html"), []byte("hello from the pod\n"), 0o644))
	srv := exec.Command("nsenter", "--net="+filepath.Join(env.Shimd.NetnsDir(), id), busybox, "httpd", "-f", "-p", "8080", "-h", www)
	require.NoError(t, srv.Start())
	stopSrv := func() { _ = srv.Process.Kill(); _ = srv.Wait() }
	t.Cleanup(stopSrv)

	for _, addr := range []string{net.JoinHostPort(ip, "8080"), fmt.Sprintf("127.0.0.1:%d", hostPort)} {
		body := httpGet(t, "http://"+addr+"/index.html")
		require.Equal(t, "hello from the pod\n", body, addr)
	}
	stopSrv()
	stopRemove(t, rs, id)
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", hostPort), time.Second)
	if err == nil {
		c.Close()
		t.Fatal("hostPort still answers after the pod was removed")
	}
}

func freePort(t *testing.T) int {
	p, err := harness.FreeTCPPort()
	require.NoError(t, err)
	return p
}

// httpGet retries until the server answers (it was just started), with a deadline.
func httpGet(t *testing.T, url string) string {
	t.Helper()
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{Proxy: nil}}
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := client.Get(url)
		if err == nil {
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, resp.StatusCode)
			return string(b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %v", url, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
