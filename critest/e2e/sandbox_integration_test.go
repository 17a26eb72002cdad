//go:build integration

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
)

func TestSandboxLifecycle(t *testing.T) {
	requireRoot(t)
	env := harness.New(t, harness.Options{})
	rs := env.Shimd.Runtime(t)

	ver, err := rs.Version(ctxT(t, 10*time.Second), &runtimeapi.VersionRequest{})
	require.NoError(t, err)
	require.Equal(t, "shimd", ver.RuntimeName)
	require.Equal(t, "v1", ver.RuntimeApiVersion)

	ids := map[string]string{}
	ips := map[string]bool{}
	for _, name := range []string{"alpha", "beta", "gamma"} {
		id := runPod(t, rs, podConfig(name))
		ids[name] = id
		st := podStatus(t, rs, id)
		require.Equal(t, runtimeapi.PodSandboxState_SANDBOX_READY, st.State)
		requireInSubnet(t, env, st.Network.Ip)
		require.False(t, ips[st.Network.Ip], "IP %s given twice", st.Network.Ip)
		ips[st.Network.Ip] = true
		require.Equal(t, name, st.Metadata.Name)
		require.Equal(t, "made by e2e", st.Annotations["note"])
		require.NotZero(t, st.CreatedAt)

		// The pod's netns exists and holds the address; resolv.conf is from DNSConfig.
		require.FileExists(t, filepath.Join(env.Shimd.NetnsDir(), id))
		resolv, err := os.ReadFile(filepath.Join(env.Shimd.RootDir(), "sandboxes", id, "resolv.conf"))
		require.NoError(t, err)
		require.Equal(t, "search e2e.svc\nnameserver 198.18.255.53\n", string(resolv))
	}

	require.Len(t, listPods(t, rs, nil), 3)
	require.Len(t, listPods(t, rs, &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"app": "beta"}}), 1)
	require.Len(t, listPods(t, rs, &runtimeapi.PodSandboxFilter{Id: ids["gamma"][:12]}), 1)
	ready := &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY}
	notReady := &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY}
	require.Len(t, listPods(t, rs, &runtimeapi.PodSandboxFilter{State: ready}), 3)

	// Stop is idempotent; a stopped pod is NOTREADY, keeps its record, loses its netns.
	ctx := ctxT(t, time.Minute)
	for i := 0; i < 2; i++ {
		_, err := rs.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: ids["alpha"]})
		require.NoError(t, err)
	}
	require.Equal(t, runtimeapi.PodSandboxState_SANDBOX_NOTREADY, podStatus(t, rs, ids["alpha"]).State)
	require.NoFileExists(t, filepath.Join(env.Shimd.NetnsDir(), ids["alpha"]))
	require.Len(t, listPods(t, rs, &runtimeapi.PodSandboxFilter{State: notReady}), 1)

	// Remove is idempotent, also for ids never seen.
	for _, id := range ids {
		stopRemove(t, rs, id)
		_, err := rs.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id})
		require.NoError(t, err)
	}
	_, err = rs.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: strings.Repeat("ab", 32)})
	require.NoError(t, err)
	_, err = rs.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: ids["beta"]})
	require.Equal(t, codes.NotFound, status.Code(err), "%v", err)
	require.Empty(t, listPods(t, rs, nil))
}

func TestHostNetworkPod(t *testing.T) {
	requireRoot(t)
	env := harness.New(t, harness.Options{})
	rs := env.Shimd.Runtime(t)
	cfg := podConfig("hostnet")
	cfg.Linux.SecurityContext.NamespaceOptions = &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE}
	id := runPod(t, rs, cfg)
	st := podStatus(t, rs, id)
	require.Equal(t, runtimeapi.PodSandboxState_SANDBOX_READY, st.State)
	require.Empty(t, st.Network.Ip, "a host-network pod gets no CNI address")
	require.Equal(t, runtimeapi.NamespaceMode_NODE, st.Linux.Namespaces.Options.Network)
	entries, _ := os.ReadDir(env.Shimd.NetnsDir())
	require.Empty(t, entries, "no netns for a host-network pod")
	stopRemove(t, rs, id)
}

func TestInvalidRequests(t *testing.T) {
	requireRoot(t)
	env := harness.New(t, harness.Options{})
	rs := env.Shimd.Runtime(t)
	ctx := ctxT(t, time.Minute)

	noUID := podConfig("bad")
	noUID.Metadata.Uid = ""
	badPort := podConfig("bad")
	badPort.PortMappings = []*runtimeapi.PortMapping{{ContainerPort: 70000}}
	tests := []struct {
		name    string
		req     *runtimeapi.RunPodSandboxRequest
		code    codes.Code
		message string
	}{
		{"no config", &runtimeapi.RunPodSandboxRequest{}, codes.InvalidArgument, "config"},
		{"no uid", &runtimeapi.RunPodSandboxRequest{Config: noUID}, codes.InvalidArgument, "config.metadata.uid"},
		{"bad port", &runtimeapi.RunPodSandboxRequest{Config: badPort}, codes.InvalidArgument, "container_port"},
		{"unknown handler", &runtimeapi.RunPodSandboxRequest{Config: podConfig("bad"), RuntimeHandler: "kata"}, codes.InvalidArgument, "kata"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := rs.RunPodSandbox(ctx, tt.req)
			require.Equal(t, tt.code, status.Code(err), "%v", err)
			require.Contains(t, status.Convert(err).Message(), tt.message)
		})
	}
	_, err := rs.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: "nope"})
	require.Equal(t, codes.NotFound, status.Code(err))
	_, err = rs.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{})
	require.Equal(t, codes.InvalidArgument, status.Code(err))
	require.Empty(t, listPods(t, rs, nil), "failed requests leave no pod")
}

// A RunPodSandbox that the caller gave up on finishes anyway, and its retry gets the
// same sandbox instead of "name is reserved".
func TestRunRetryReturnsSameSandbox(t *testing.T) {
	requireRoot(t)
	env := harness.New(t, harness.Options{})
	rs := env.Shimd.Runtime(t)
	cfg := podConfig("retry")
	_, err := rs.RunPodSandbox(ctxT(t, 5*time.Millisecond), &runtimeapi.RunPodSandboxRequest{Config: cfg})
	require.Equal(t, codes.DeadlineExceeded, status.Code(err), "%v", err)
	id := runPod(t, rs, cfg)
	again := runPod(t, rs, cfg)
	require.Equal(t, id, again)
	pods := listPods(t, rs, nil)
	require.Len(t, pods, 1)
	require.Equal(t, runtimeapi.PodSandboxState_SANDBOX_READY, podStatus(t, rs, id).State)
	stopRemove(t, rs, id)
}

func TestStatusAndRuntimeConfig(t *testing.T) {
	requireRoot(t)
	env := harness.New(t, harness.Options{})
	rs := env.Shimd.Runtime(t)
	ctx := ctxT(t, time.Minute)
	st, err := rs.Status(ctx, &runtimeapi.StatusRequest{Verbose: true})
	require.NoError(t, err)
	for _, c := range st.Status.Conditions {
		require.True(t, c.Status, "condition %s: %s", c.Type, c.Message)
	}
	require.Contains(t, st.Info["config"], env.Shimd.Socket())
	var names []string
	for _, h := range st.RuntimeHandlers {
		names = append(names, h.Name)
	}
	require.Contains(t, names, "runc")
	rc, err := rs.RuntimeConfig(ctx, &runtimeapi.RuntimeConfigRequest{})
	require.NoError(t, err)
	require.Equal(t, runtimeapi.CgroupDriver_CGROUPFS, rc.Linux.CgroupDriver)
	_, err = rs.UpdateRuntimeConfig(ctx, &runtimeapi.UpdateRuntimeConfigRequest{RuntimeConfig: &runtimeapi.RuntimeConfig{
		NetworkConfig: &runtimeapi.NetworkConfig{PodCidr: env.CNI.Subnet.String()}}})
	require.NoError(t, err)
}

func TestNetworkNotReadyWithoutCNIConfig(t *testing.T) {
	requireRoot(t)
	env := harness.New(t, harness.Options{Shimd: harness.ShimdOptions{NoCNIConfig: true}})
	rs := env.Shimd.Runtime(t)
	st, err := rs.Status(ctxT(t, time.Minute), &runtimeapi.StatusRequest{})
	require.NoError(t, err)
	for _, c := range st.Status.Conditions {
		switch c.Type {
		case runtimeapi.RuntimeReady:
			require.True(t, c.Status)
		case runtimeapi.NetworkReady:
			require.False(t, c.Status)
			require.NotEmpty(t, c.Reason)
		}
	}
	// A pod needing the network fails cleanly; nothing is left behind.
	_, err = rs.RunPodSandbox(ctxT(t, time.Minute), &runtimeapi.RunPodSandboxRequest{Config: podConfig("nonet")})
	require.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)
	require.Empty(t, listPods(t, rs, nil))
}
