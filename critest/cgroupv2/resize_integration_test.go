//go:build integration

package cgroupv2

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shimd/shimd/critest/cluster"
	"github.com/shimd/shimd/critest/vm"
)

// In-place resize (GA) of a running pod's CPU and memory needs the API server: a
// control plane v1.37.2 on the host (critest/cluster), the guest's kubelet
// registered to it through the one port the guest may reach. The kubelet resizes the
// pod through UpdateContainerResources; the container is not restarted and its
// cgroup v2 files and the pod's follow.
func TestKubeletInPlaceResize(t *testing.T) {
	requireGuest(t)
	c := cluster.Start(t, cluster.Options{RuntimeEndpoint: "unix:///run/shimd/shimd.sock", NodeName: "shimd-vm",
		NodeIP: vm.GuestIP, APIPort: apiPort, ExternalKubelet: true})
	kc, err := c.KubeletKubeconfig("https://kubernetes:6443")
	require.NoError(t, err)
	conf := file(t, "kubelet.kubeconfig", string(kc))
	host, _, _ := strings.Cut(apiAddr, ":")
	sh(t, "grep -q ' kubernetes$' /etc/hosts || echo '"+host+" kubernetes' >>/etc/hosts")
	startKubelet(t, "--kubeconfig", conf, "--node-ip", vm.GuestIP)
	c.WaitNodeReady(t, 5*time.Minute)

	c.Apply(t, `apiVersion: v1
kind: Pod
metadata: {name: resize, namespace: default}
spec:
  terminationGracePeriodSeconds: 1
  automountServiceAccountToken: false
  containers:
  - name: main
    image: `+busybox+`
    imagePullPolicy: IfNotPresent
    command: [sleep, "100000"]
    resizePolicy: [{resourceName: cpu, restartPolicy: NotRequired}, {resourceName: memory, restartPolicy: NotRequired}]
    resources: {requests: {cpu: 100m, memory: 64Mi}, limits: {cpu: 200m, memory: 128Mi}}
`)
	t.Cleanup(func() { _, _ = c.Kubectl(t, "delete", "pod", "resize", "--wait=true", "--timeout=3m") })
	get := func(path string) string {
		out, err := c.Kubectl(t, "get", "pod", "resize", "-o", "jsonpath="+path)
		require.NoError(t, err)
		return out
	}
	c.WaitFor(t, 5*time.Minute, "pod resize Running", func() error {
		if p := get("{.status.phase}"); p != "Running" {
			return fmt.Errorf("phase %q", p)
		}
		return nil
	})
	cid := get("{.status.containerStatuses[0].containerID}")
	_, id, ok := strings.Cut(cid, "://")
	require.True(t, ok, "container id %q", cid)
	dir := cgroupDir(t, id)
	podDir := dir[:strings.LastIndex(dir, "/")]
	require.Equal(t, map[string]string{"cpu.max": "20000 100000", "memory.max": "134217728"}, readCgroup(t, dir, "cpu.max", "memory.max"))

	_, err = c.Kubectl(t, "patch", "pod", "resize", "--subresource", "resize", "-p",
		`{"spec":{"containers":[{"name":"main","resources":{"requests":{"cpu":"150m","memory":"64Mi"},"limits":{"cpu":"400m","memory":"192Mi"}}}]}}`)
	require.NoError(t, err)
	c.WaitFor(t, 5*time.Minute, "the resize applied", func() error {
		if got := get("{.status.containerStatuses[0].resources.limits.cpu} {.status.containerStatuses[0].resources.limits.memory}"); got != "400m 192Mi" {
			return fmt.Errorf("status limits %q", got)
		}
		return nil
	})
	require.Equal(t, map[string]string{"cpu.max": "40000 100000", "memory.max": "201326592"}, readCgroup(t, dir, "cpu.max", "memory.max"))
	require.Equal(t, map[string]string{"cpu.max": "40000 100000", "memory.max": "201326592"}, readCgroup(t, podDir, "cpu.max", "memory.max"), "pod cgroup %s", podDir)
	require.Equal(t, cid, get("{.status.containerStatuses[0].containerID}"), "the same container")
	require.Equal(t, "0", get("{.status.containerStatuses[0].restartCount}"))
}
