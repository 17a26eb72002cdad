//go:build integration

// Package e2e drives a real shimd on a real containerd, runc and CNI plugins through
// its CRI socket and through crictl. Run as root: go test -tags integration ./critest/e2e/
package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
)

func TestMain(m *testing.M) { harness.Main(m) }

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("integration tests need root")
	}
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

var podSeq int

func podConfig(name string) *runtimeapi.PodSandboxConfig {
	podSeq++
	return &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{
			Name: name, Namespace: "e2e", Uid: fmt.Sprintf("uid-%s-%d-%d", name, os.Getpid(), podSeq),
		},
		Hostname:     name,
		LogDirectory: "/tmp",
		Labels:       map[string]string{"app": name, "suite": "e2e"},
		Annotations:  map[string]string{"note": "made by e2e"},
		DnsConfig:    &runtimeapi.DNSConfig{Servers: []string{"198.18.255.53"}, Searches: []string{"e2e.svc"}},
		Linux:        &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: suiteNS()}},
	}
}

// pausePodConfig is podConfig for a pod whose containers share its PID namespace: it
// has a pause process in either sandbox.pause mode (for tests of the pause task).
func pausePodConfig(name string) *runtimeapi.PodSandboxConfig {
	cfg := podConfig(name)
	cfg.Linux.SecurityContext.NamespaceOptions = &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_POD}
	return cfg
}

// suiteNS are the namespace options of the suite's pods and containers: none (the
// CRI's zero value: the pod's PID namespace is shared, which needs a pause process),
// or, when the suite runs with SHIMD_PAUSE=when-needed, a PID namespace per container,
// as the kubelet asks for, so that the pods run without a pause process. shimd's
// default mode is when-needed, and the kubelet, cluster and conformance suites run
// its pods pause-less; this suite's pods keep their pause unless asked, so that the
// pause container's paths are proven on every run too.
func suiteNS() *runtimeapi.NamespaceOption {
	if harness.PauseMode() == "when-needed" {
		return &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER}
	}
	return nil
}

func runPod(t *testing.T, rs runtimeapi.RuntimeServiceClient, cfg *runtimeapi.PodSandboxConfig) string {
	t.Helper()
	resp, err := rs.RunPodSandbox(ctxT(t, 2*time.Minute), &runtimeapi.RunPodSandboxRequest{Config: cfg})
	require.NoError(t, err)
	return resp.PodSandboxId
}

func stopRemove(t *testing.T, rs runtimeapi.RuntimeServiceClient, id string) {
	t.Helper()
	ctx := ctxT(t, time.Minute)
	_, err := rs.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id})
	require.NoError(t, err)
	_, err = rs.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id})
	require.NoError(t, err)
}

func podStatus(t *testing.T, rs runtimeapi.RuntimeServiceClient, id string) *runtimeapi.PodSandboxStatus {
	t.Helper()
	resp, err := rs.PodSandboxStatus(ctxT(t, 30*time.Second), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id, Verbose: true})
	require.NoError(t, err)
	return resp.Status
}

func listPods(t *testing.T, rs runtimeapi.RuntimeServiceClient, f *runtimeapi.PodSandboxFilter) []*runtimeapi.PodSandbox {
	t.Helper()
	resp, err := rs.ListPodSandbox(ctxT(t, 30*time.Second), &runtimeapi.ListPodSandboxRequest{Filter: f})
	require.NoError(t, err)
	return resp.Items
}

// waitReady waits until shimd answers a non-Version RPC (recovery done).
func waitReady(t *testing.T, rs runtimeapi.RuntimeServiceClient) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, err := rs.ListPodSandbox(ctxT(t, 5*time.Second), &runtimeapi.ListPodSandboxRequest{})
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("shimd not ready: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func requireInSubnet(t *testing.T, env *harness.Env, ip string) {
	t.Helper()
	parsed := net.ParseIP(ip)
	require.NotNil(t, parsed, "pod IP %q", ip)
	require.True(t, env.CNI.Subnet.Contains(parsed), "pod IP %s not in %s", ip, env.CNI.Subnet)
	_, bench, _ := net.ParseCIDR("198.18.0.0/15")
	require.True(t, bench.Contains(parsed))
}

// restartShimd kills shimd with SIGKILL, starts it again and waits until it has
// recovered; it returns a client of the new shimd.
func restartShimd(t *testing.T, env *harness.Env) runtimeapi.RuntimeServiceClient {
	t.Helper()
	env.Shimd.Kill9()
	env.Shimd.Start(t)
	rs := env.Shimd.Runtime(t)
	waitReady(t, rs)
	return rs
}
