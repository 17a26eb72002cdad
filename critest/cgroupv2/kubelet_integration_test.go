//go:build integration

package cgroupv2

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// kubeletBinary is v1.37.2 from the host's tool cache (make tools).
const kubeletBinary = "/mnt/tools/bin/k8s-v1.37.2/kubelet"

// startKubelet runs a standalone kubelet v1.37.2 in the guest as a transient
// systemd unit, with its default failCgroupV1 and the guest's cgroup driver, on
// shimd; it is stopped (its static pods first) at the end of the test.
func startKubelet(t *testing.T, extraArgs ...string) {
	cfg := map[string]any{
		"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
		"cgroupDriver": vmDriver, "staticPodPath": "/etc/kubernetes/manifests",
		"address": "127.0.0.1", "readOnlyPort": 10255, "healthzBindAddress": "127.0.0.1", "healthzPort": 10248,
		"authentication": map[string]any{"anonymous": map[string]any{"enabled": true}, "webhook": map[string]any{"enabled": false}},
		"authorization":  map[string]any{"mode": "AlwaysAllow"},
		"resolvConf":     "", "makeIPTablesUtilChains": false,
		"fileCheckFrequency": "2s", "syncFrequency": "10s",
		// MemoryQoS is on by default from 1.37, but memory.high is set only with a
		// throttling factor, which defaults to none from 1.37 on.
		"memoryThrottlingFactor":      0.9,
		"imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
		"evictionHard": map[string]string{"memory.available": "1Mi", "nodefs.available": "1%", "imagefs.available": "1%", "nodefs.inodesFree": "1%"},
	}
	b, err := json.Marshal(cfg)
	require.NoError(t, err)
	conf := file(t, "kubelet.json", string(b))
	sh(t, "mkdir -p /etc/kubernetes/manifests && systemd-run --unit=kubelet --property=Delegate=yes "+kubeletBinary+
		" --config "+conf+" --hostname-override shimd-vm --container-runtime-endpoint unix:///run/shimd/shimd.sock --v 2 "+
		strings.Join(extraArgs, " ")+" >/dev/null")
	t.Cleanup(func() {
		sh(t, "rm -f /etc/kubernetes/manifests/*")
		waitFor(t, 3*time.Minute, "the static pods removed", func() bool {
			return sh(t, "crictl pods -q --label io.kubernetes.pod.namespace=default | wc -l") == "0"
		})
		// The pods' cgroups are the kubelet's to remove (its housekeeping).
		waitFor(t, 3*time.Minute, "the pod cgroups removed", func() bool {
			return sh(t, `find /sys/fs/cgroup -type d \( -name 'kubepods-*pod*' -o -path '*/kubepods/*/pod*' \) | wc -l`) == "0"
		})
		sh(t, "systemctl stop kubelet; systemctl reset-failed kubelet 2>/dev/null || true")
	})
	waitFor(t, 3*time.Minute, "kubelet healthz", func() bool {
		code, out := shCode(t, getScript+"get 10248 /healthz")
		return code == 0 && strings.HasSuffix(out, "ok")
	})
	t.Logf("%s, cgroupDriver %s", sh(t, kubeletBinary+" --version"), vmDriver)
}

// getScript defines get PORT PATH: an HTTP GET of 127.0.0.1 with bash alone.
const getScript = `get() { exec 3<>/dev/tcp/127.0.0.1/$1 && printf 'GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' "$2" >&3 && sed '1,/^\r$/d' <&3; }; `

func waitFor(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			out := sh(t, "journalctl -u kubelet --no-pager | tail -n 40")
			t.Fatalf("waited %s for %s; kubelet's journal:\n%s", d, what, out)
		}
		time.Sleep(2 * time.Second)
	}
}

// staticPod writes a manifest and waits for its container "main" to run;
// it returns the container's id.
func staticPod(t *testing.T, name, manifest string) string {
	sh(t, fmt.Sprintf("cat >/etc/kubernetes/manifests/%s.json <<'EOF'\n%s\nEOF", name, manifest))
	var id string
	waitFor(t, 5*time.Minute, "static pod "+name, func() bool {
		id = sh(t, "crictl ps -q --state running --name main --label io.kubernetes.pod.name="+name+"-shimd-vm")
		return id != ""
	})
	return id
}

// A burstable static pod under kubelet 1.37.2 with the guest's cgroup driver:
// its limits, the kubelet's memory.oom.group=1, MemoryQoS's memory.high (beta, on
// by default in 1.37, with memoryThrottlingFactor 0.9) and NoSwap's memory.swap.max=0 in the container's cgroup;
// the pod's own cgroup limits; PSI in the kubelet's summary.
func TestKubeletStaticPod(t *testing.T) {
	requireGuest(t)
	startKubelet(t)
	id := staticPod(t, "burst", `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"burst","namespace":"default"},
  "spec":{"terminationGracePeriodSeconds":1,"containers":[{"name":"main","image":"`+busybox+`","command":["sleep","100000"],
  "resources":{"requests":{"cpu":"100m","memory":"32Mi"},"limits":{"cpu":"500m","memory":"64Mi"}}}]}}`)
	dir := cgroupDir(t, id)
	t.Logf("container cgroup %s", dir)
	const req, lim, page = 32 << 20, 64 << 20, 4096
	high := int64(math.Floor((req+(lim-req)*0.9)/page)) * page // kubelet's memoryThrottlingFactor 0.9
	got := readCgroup(t, dir, "memory.max", "memory.high", "memory.oom.group", "memory.swap.max", "cpu.max")
	require.Equal(t, map[string]string{
		"memory.max": "67108864", "memory.high": fmt.Sprint(high), "memory.oom.group": "1",
		"memory.swap.max": "0", "cpu.max": "50000 100000",
	}, got)
	podDir := dir[:strings.LastIndex(dir, "/")]
	require.Equal(t, "67108864", readCgroup(t, podDir, "memory.max")["memory.max"], "the pod cgroup %s", podDir)
	if vmDriver == "systemd" {
		require.Contains(t, podDir, "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod")
	} else {
		require.Contains(t, podDir, "/kubepods/burstable/pod")
	}

	// The kubelet's summary carries the PSI that shimd reports (KubeletPSI, GA).
	var summary struct {
		Pods []struct {
			PodRef     struct{ Name string } `json:"podRef"`
			Containers []struct {
				Name string
				CPU  struct {
					PSI *struct{ Some *struct{ Total uint64 } } `json:"psi"`
				} `json:"cpu"`
			} `json:"containers"`
		} `json:"pods"`
	}
	waitFor(t, 2*time.Minute, "the pod in the summary with PSI", func() bool {
		out := sh(t, getScript+"get 10255 /stats/summary")
		if json.Unmarshal([]byte(out), &summary) != nil {
			return false
		}
		for _, p := range summary.Pods {
			for _, c := range p.Containers {
				if p.PodRef.Name == "burst-shimd-vm" && c.Name == "main" && c.CPU.PSI != nil && c.CPU.PSI.Some != nil {
					return true
				}
			}
		}
		return false
	})
}

// Pod-level resources (beta, on by default): the pod's cgroup takes the pod's
// limits, and a container without its own gets the pod's (the kubelet's
// getMemoryLimit and getCPULimit fall back to them).
func TestKubeletPodLevelResources(t *testing.T) {
	requireGuest(t)
	startKubelet(t)
	id := staticPod(t, "podlevel", `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"podlevel","namespace":"default"},
  "spec":{"terminationGracePeriodSeconds":1,"resources":{"requests":{"cpu":"100m","memory":"48Mi"},"limits":{"cpu":"300m","memory":"96Mi"}},
  "containers":[{"name":"main","image":"`+busybox+`","command":["sleep","100000"]}]}}`)
	dir := cgroupDir(t, id)
	podDir := dir[:strings.LastIndex(dir, "/")]
	require.Equal(t, map[string]string{"memory.max": "100663296", "cpu.max": "30000 100000"},
		readCgroup(t, podDir, "memory.max", "cpu.max"), "pod cgroup %s", podDir)
	require.Equal(t, map[string]string{"memory.max": "100663296", "cpu.max": "30000 100000"},
		readCgroup(t, dir, "memory.max", "cpu.max"), "container cgroup %s", dir)
}
