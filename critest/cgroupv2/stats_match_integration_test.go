//go:build integration

package cgroupv2

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// containerd's own CRI plugin in the guest, beside shimd's containerd: a second
// containerd with its own root, state, sockets, runc root and CNI network (a bridge
// of its own on 198.19.128.0/17), the guest's cgroup driver, the same registry
// mirrors and runc. Its stats_collect_period is the default, 1 s.
const (
	criSock   = "/run/containerd-cri/containerd.sock"
	criCrictl = "crictl -r unix://" + criSock + " -i unix://" + criSock
)

func criConfig(systemd bool) string {
	return fmt.Sprintf(`version = 3
root = "/var/lib/containerd-cri"
state = "/run/containerd-cri"
imports = []
disabled_plugins = ["io.containerd.nri.v1.nri"]
[grpc]
  address = %q
[ttrpc]
  address = "/run/containerd-cri/ttrpc.sock"
[debug]
  address = "/run/containerd-cri/debug.sock"
[metrics]
  address = ""
[plugins]
  [plugins.'io.containerd.shim.v1.manager']
    socket_dir = "/run/containerd-cri/s"
  [plugins.'io.containerd.grpc.v1.cri']
    disable_tcp_service = true
    stream_server_address = '127.0.0.1'
    stream_server_port = '0'
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = 'overlayfs'
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = 'registry.k8s.io/pause:3.10'
    [plugins.'io.containerd.cri.v1.images'.registry]
      config_path = '/etc/shimd/certs.d'
  [plugins.'io.containerd.cri.v1.runtime']
    restrict_oom_score_adj = true
    netns_mounts_under_state_dir = true
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = 'runc'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = 'io.containerd.runc.v2'
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = '/usr/local/sbin/runc'
          Root = '/run/containerd-cri/runc'
          SystemdCgroup = %v
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ['/usr/lib/cni']
      conf_dir = '/etc/containerd-cri/net.d'
      max_conf_num = 1
`, criSock, systemd)
}

// startContainerdCRI starts containerd's CRI in the guest (a transient unit) and
// waits until it is ready; the test's cleanup stops it and removes its files.
func startContainerdCRI(t *testing.T) {
	cfg := file(t, "containerd-cri.toml", criConfig(vmDriver == "systemd"))
	sh(t, `mkdir -p /etc/containerd-cri/net.d && cat >/etc/containerd-cri/net.d/10-cri.conflist <<'EOF'
{"cniVersion": "1.0.0", "name": "containerd-cri", "plugins": [
  {"type": "bridge", "bridge": "shimd-vm1", "isGateway": true, "ipMasq": false,
   "ipam": {"type": "host-local", "dataDir": "/run/containerd-cri/ipam", "ranges": [[{"subnet": "198.19.128.0/17"}]]}},
  {"type": "loopback"}
]}
EOF
systemd-run --unit=containerd-cri --property=Delegate=yes --property=KillMode=process /mnt/tools/bin/containerd --config `+cfg)
	t.Cleanup(func() {
		sh(t, criCrictl+` rmp -fa >/dev/null 2>&1; systemctl stop containerd-cri; umount -R /run/containerd-cri 2>/dev/null
ip link del shimd-vm1 2>/dev/null; rm -rf /var/lib/containerd-cri /run/containerd-cri /etc/containerd-cri; true`)
	})
	sh(t, `for _ in $(seq 120); do `+criCrictl+` info -o go-template --template '{{range .status.conditions}}{{.type}}={{.status}} {{end}}' 2>/dev/null |
	grep -q 'NetworkReady=true' && break; sleep 1; done
`+criCrictl+` pull `+busybox+` >/dev/null`)
}

// guestPod is one pod of the comparison, on shimd or on containerd's CRI.
type guestPod struct {
	crictl, runtime, kind string
	id                    string
	ctrs                  map[string]string
	started               time.Time
	cpu                   []uint64
	exiterCPU             uint64
}

// The guest's workload: as TestStatsMatchContainerdCRI's on the host, lighter (the
// guest runs 10-18x slower): a busy loop at a fifth of a core, a hog of 40 MiB of
// /dev/shm, and a container that burns a tenth of a core for 15 s and exits.
var guestWorkload = []struct {
	name, resources string
	cmd             []string
}{
	{"busy", `{"cpu_period":100000,"cpu_quota":20000}`, []string{"sh", "-c", "while :; do :; done"}},
	{"hog", `{}`, []string{"sh", "-c", "dd if=/dev/zero of=/dev/shm/hog bs=1M count=40 && exec sleep 3600"}},
	{"exiter", `{"cpu_period":100000,"cpu_quota":10000}`, []string{"sh", "-c", "while :; do :; done & sleep 15; kill $!"}},
}

// runGuestPod runs a pod of kind ("pause-less": its own PID namespace per
// container; "with pause": a shared one) with guestWorkload, under a cgroup parent
// spelled as the kubelet spells it for the guest's driver.
func runGuestPod(t *testing.T, crictl, runtime, kind string) *guestPod {
	uid := fmt.Sprintf("sm-%s-%d", runtime, time.Now().UnixNano())
	parent := "kubepods-burstable-pod" + strings.ReplaceAll(uid, "-", "_") + ".slice"
	if vmDriver == "cgroupfs" {
		parent = "/kubepods/burstable/pod" + uid
	}
	pid := 0 // POD
	if kind == "pause-less" {
		pid = 1 // CONTAINER
	}
	ns := fmt.Sprintf(`{"namespace_options":{"pid":%d}}`, pid)
	podCfg := file(t, "pod-"+uid+".json", fmt.Sprintf(`{"metadata":{"name":"stats-match","namespace":"cgroupv2","uid":%q},
		"log_directory":"/var/log/pods/%s","linux":{"cgroup_parent":%q,"security_context":%s}}`, uid, uid, parent, ns))
	p := &guestPod{crictl: crictl, runtime: runtime, kind: kind, ctrs: map[string]string{}}
	p.id = sh(t, crictl+" runp "+podCfg)
	t.Cleanup(func() {
		sh(t, crictl+" stopp "+p.id+" >/dev/null && "+crictl+" rmp "+p.id+" >/dev/null")
		if vmDriver == "cgroupfs" {
			sh(t, "rmdir /sys/fs/cgroup"+parent+" 2>/dev/null; true")
		} else {
			sh(t, "systemctl stop "+parent)
		}
	})
	for _, w := range guestWorkload {
		cmd, _ := json.Marshal(w.cmd)
		cfg := file(t, "ctr-"+uid+"-"+w.name+".json", fmt.Sprintf(`{"metadata":{"name":%q},"image":{"image":%q},
			"command":%s,"log_path":"%s.log","linux":{"resources":%s,"security_context":%s}}`, w.name, busybox, cmd, w.name, w.resources, ns))
		id := sh(t, fmt.Sprintf("%s create %s %s %s", crictl, p.id, cfg, podCfg))
		sh(t, crictl+" start "+id+" >/dev/null")
		p.ctrs[w.name] = id
		if w.name == "busy" {
			p.started = time.Now()
		}
	}
	return p
}

// criValue is a CRI UInt64Value as crictl prints it.
type criValue struct {
	Value string `json:"value"`
}

func (v criValue) u64() uint64 { n, _ := strconv.ParseUint(v.Value, 10, 64); return n }

type criCPUMem struct {
	CPU struct {
		UsageCoreNanoSeconds criValue `json:"usageCoreNanoSeconds"`
		UsageNanoCores       criValue `json:"usageNanoCores"`
	} `json:"cpu"`
	Memory struct {
		WorkingSetBytes criValue `json:"workingSetBytes"`
	} `json:"memory"`
}

type criContainerStats struct {
	Attributes struct {
		ID string `json:"id"`
	} `json:"attributes"`
	criCPUMem
}

type criPodStats struct {
	Stats []struct {
		Linux struct {
			criCPUMem
			Process struct {
				ProcessCount criValue `json:"processCount"`
			} `json:"process"`
			Containers []criContainerStats `json:"containers"`
		} `json:"linux"`
	} `json:"stats"`
}

// poll reads the pod's stats (ListPodSandboxStats through crictl statsp) and the
// exiter's state in one guest command; it tells whether the exiter has exited.
func (p *guestPod) poll(t *testing.T) (exited bool) {
	script := p.crictl + " statsp -o json --id " + p.id
	if id := p.ctrs["exiter"]; id != "" {
		script += "; echo @@; " + p.crictl + " inspect -o go-template --template '{{.status.state}}' " + id
	}
	out, state, _ := strings.Cut(sh(t, script), "@@")
	var st criPodStats
	require.NoError(t, json.Unmarshal([]byte(out), &st), out)
	require.Len(t, st.Stats, 1, out)
	l := st.Stats[0].Linux
	p.cpu = append(p.cpu, l.CPU.UsageCoreNanoSeconds.u64())
	for _, c := range l.Containers {
		if c.Attributes.ID == p.ctrs["exiter"] && c.CPU.UsageCoreNanoSeconds.Value != "" {
			p.exiterCPU = c.CPU.UsageCoreNanoSeconds.u64()
		}
		if c.Attributes.ID == p.ctrs["busy"] && p.runtime == "shimd" && time.Since(p.started) > 1500*time.Millisecond {
			require.NotZero(t, c.CPU.UsageNanoCores.u64(), "shimd %s: busy rate %s after its start: %s", p.kind, time.Since(p.started), out)
		}
	}
	return p.ctrs["exiter"] == "" || strings.TrimSpace(state) == "CONTAINER_EXITED"
}

// TestStatsMatchContainerdOnCgroupV2 is TestStatsMatchContainerdCRI (critest/bench)
// in the cgroup v2 guest with its cgroup driver (systemd: the pod's cgroup is its
// slice): shimd's pods, pause-less and with a pause, against containerd's CRI's of
// the same configs, through crictl. Tolerances: usage_nano_cores within 0.1 core of
// containerd's, working sets within 8 MiB, process counts equal; each pod's CPU
// holds its exited container's and never goes down.
func TestStatsMatchContainerdOnCgroupV2(t *testing.T) {
	requireGuest(t)
	startContainerdCRI(t)
	var pods []*guestPod
	for _, rt := range []struct{ crictl, name string }{{"crictl", "shimd"}, {criCrictl, "containerd"}} {
		for _, kind := range []string{"pause-less", "with pause"} {
			pods = append(pods, runGuestPod(t, rt.crictl, rt.name, kind))
		}
	}
	var removedAt time.Time
	for deadline := time.Now().Add(5 * time.Minute); removedAt.IsZero() || time.Since(removedAt) < 5*time.Second; {
		require.True(t, time.Now().Before(deadline), "the exiting containers did not exit")
		exited := 0
		for _, p := range pods {
			if p.poll(t) {
				exited++
			}
		}
		if exited == len(pods) && removedAt.IsZero() {
			for _, p := range pods {
				sh(t, p.crictl+" rm "+p.ctrs["exiter"]+" >/dev/null")
				delete(p.ctrs, "exiter")
			}
			removedAt = time.Now()
		}
	}
	type figures struct{ podCPU, ctrCPU, podRate, busyRate, podWS, hogWS, processes uint64 }
	final := map[*guestPod]figures{}
	for _, p := range pods {
		out := sh(t, p.crictl+" statsp -o json --id "+p.id)
		var st criPodStats
		require.NoError(t, json.Unmarshal([]byte(out), &st), out)
		require.Len(t, st.Stats, 1, out)
		l := st.Stats[0].Linux
		f := figures{podCPU: l.CPU.UsageCoreNanoSeconds.u64(), podRate: l.CPU.UsageNanoCores.u64(),
			podWS: l.Memory.WorkingSetBytes.u64(), processes: l.Process.ProcessCount.u64()}
		for _, c := range l.Containers {
			f.ctrCPU += c.CPU.UsageCoreNanoSeconds.u64()
			switch c.Attributes.ID {
			case p.ctrs["busy"]:
				f.busyRate = c.CPU.UsageNanoCores.u64()
			case p.ctrs["hog"]:
				f.hogWS = c.Memory.WorkingSetBytes.u64()
			}
		}
		final[p] = f
		t.Logf("%s %s pod: %+v; pod CPU at each poll %v; exiter's last seen %d", p.runtime, p.kind, f, p.cpu, p.exiterCPU)
	}
	for i, s := range pods[:2] {
		c := pods[2+i]
		fs, fc := final[s], final[c]
		require.InDelta(t, float64(fc.busyRate), float64(fs.busyRate), 100e6, "%s: busy container's usage_nano_cores", s.kind)
		require.InDelta(t, float64(fc.podRate), float64(fs.podRate), 100e6, "%s: pod's usage_nano_cores", s.kind)
		require.InDelta(t, float64(fc.hogWS), float64(fs.hogWS), 8<<20, "%s: hog's working set", s.kind)
		require.InDelta(t, float64(fc.podWS), float64(fs.podWS), 8<<20, "%s: pod's working set", s.kind)
		require.Equal(t, fc.processes, fs.processes, "%s: process count", s.kind)
	}
	for _, p := range pods {
		f := final[p]
		require.GreaterOrEqual(t, f.busyRate, uint64(50e6), "%s %s: busy loop", p.runtime, p.kind)
		require.GreaterOrEqual(t, f.podWS, uint64(40<<20), "%s %s: the pod holds the hog's memory", p.runtime, p.kind)
		require.GreaterOrEqual(t, f.podCPU, f.ctrCPU+p.exiterCPU, "%s %s: pod CPU holds the exited container's", p.runtime, p.kind)
		for i := 1; i < len(p.cpu); i++ {
			require.GreaterOrEqual(t, p.cpu[i], p.cpu[i-1], "%s %s: pod CPU went down at poll %d: %v", p.runtime, p.kind, i, p.cpu)
		}
	}
}
