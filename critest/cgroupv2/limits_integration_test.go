//go:build integration

package cgroupv2

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const busybox = "docker.io/library/busybox:latest"

// pod is a pod sandbox made with crictl in the guest, stopped and removed at the
// end of the test.
type pod struct {
	t          *testing.T
	id, config string
}

// newPod runs a pod whose cgroup parent is a burstable pod's, spelled as the
// kubelet spells it for the guest's cgroup driver.
func newPod(t *testing.T, name string) *pod { return newPodLinux(t, name, "") }

// newPodLinux is newPod with more fields of the pod's linux config (JSON, each
// preceded by a comma).
func newPodLinux(t *testing.T, name, linux string) *pod {
	uid := fmt.Sprintf("%s-%d", name, time.Now().UnixNano())
	// The kubelet's systemd slice name of the pod: '-' in the UID escaped to '_'.
	parent := "kubepods-burstable-pod" + strings.ReplaceAll(uid, "-", "_") + ".slice"
	if vmDriver == "cgroupfs" {
		parent = "/kubepods/burstable/pod" + uid
	}
	cfg := file(t, "pod-"+uid+".json", fmt.Sprintf(`{"metadata":{"name":%q,"namespace":"cgroupv2","uid":%q},
		"log_directory":"/var/log/pods/%s","linux":{"cgroup_parent":%q%s}}`, name, uid, uid, parent, linux))
	p := &pod{t: t, config: cfg}
	p.id = sh(t, "crictl runp "+cfg)
	t.Cleanup(func() {
		sh(t, "crictl stopp "+p.id+" >/dev/null && crictl rmp "+p.id+" >/dev/null")
		// The pod's cgroup is the kubelet's to remove, and the test plays the
		// kubelet: runc made it as the parent of the pause's (cgroupfs), or systemd
		// made the slice the pause's scope named, and keeps it, empty and active,
		// until someone stops it (seen for minutes, OOM or not), as the kubelet does.
		if vmDriver == "cgroupfs" {
			sh(t, "rmdir /sys/fs/cgroup"+parent)
		} else {
			sh(t, "systemctl stop "+parent)
		}
	})
	return p
}

// container creates and starts a busybox container from the JSON of its
// resources (LinuxContainerResources) and command.
func (p *pod) container(name string, command []string, resources string) string {
	cmd, _ := json.Marshal(command)
	cfg := file(p.t, "ctr-"+p.id[:12]+"-"+name+".json", fmt.Sprintf(`{"metadata":{"name":%q},"image":{"image":%q},
		"command":%s,"log_path":"%s.log","linux":{"resources":%s}}`, name, busybox, cmd, name, resources))
	id := sh(p.t, fmt.Sprintf("crictl create %s %s %s", p.id, cfg, p.config))
	sh(p.t, "crictl start "+id+" >/dev/null")
	return id
}

// cgroupDir is the container's cgroup directory, read from its process.
func cgroupDir(t *testing.T, id string) string {
	pid := sh(t, `crictl inspect -o go-template --template '{{.info.pid}}' `+id)
	line := sh(t, "cat /proc/"+pid+"/cgroup")
	path, ok := strings.CutPrefix(line, "0::")
	require.True(t, ok, "a pure cgroup v2 process has one 0:: line, got %q", line)
	return "/sys/fs/cgroup" + path
}

// readCgroup reads the named files of a cgroup directory.
func readCgroup(t *testing.T, dir string, files ...string) map[string]string {
	out := sh(t, "cd "+dir+" && for f in "+strings.Join(files, " ")+`; do printf '%s=%s\n' $f "$(cat $f)"; done`)
	got := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		k, v, _ := strings.Cut(l, "=")
		got[k] = v
	}
	return got
}

// cpuWeight is runc 1.5's conversion of CPU shares to cgroup v2's cpu.weight
// (opencontainers/cgroups ConvertCPUSharesToCgroupV2Value): 2 -> 1, 1024 -> 100,
// 262144 -> 10000 on a quadratic in log2(shares).
func cpuWeight(shares uint64) string {
	l := math.Log2(float64(shares))
	return strconv.FormatUint(uint64(math.Ceil(math.Pow(10, (l*l+125*l)/612.0-7.0/34.0))), 10)
}

// The kubelet's limits and its unified settings (memory.oom.group from 1.32 on,
// memory.high with MemoryQoS, memory.swap.max with NoSwap) land in the cgroup
// v2 files of the container, in a cgroup of the driver's kind below the pod's.
func TestLimitsAsCgroupV2Files(t *testing.T) {
	requireGuest(t)
	p := newPod(t, "limits")
	id := p.container("main", []string{"sleep", "100000"}, `{"memory_limit_in_bytes":67108864,
		"cpu_period":100000,"cpu_quota":50000,"cpu_shares":512,
		"unified":{"memory.high":"50331648","memory.oom.group":"1","memory.swap.max":"0","pids.max":"99"}}`)
	dir := cgroupDir(t, id)
	t.Logf("container cgroup %s", dir)
	require.Equal(t, map[string]string{
		"memory.max": "67108864", "memory.high": "50331648", "memory.oom.group": "1", "memory.swap.max": "0",
		"cpu.max": "50000 100000", "cpu.weight": cpuWeight(512), "pids.max": "99",
	}, readCgroup(t, dir, "memory.max", "memory.high", "memory.oom.group", "memory.swap.max", "cpu.max", "cpu.weight", "pids.max"))

	if vmDriver == "systemd" {
		// A unit systemd itself knows, below the pod's slice, with the limits as
		// its properties: never a cgroupfs path inside systemd's tree.
		require.Contains(t, dir, "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podlimits_")
		unit := dir[strings.LastIndex(dir, "/")+1:]
		require.True(t, strings.HasSuffix(unit, ".scope"), "cgroup %s is a systemd scope", dir)
		require.Equal(t, "MemoryMax=67108864\nActiveState=active", sh(t, "systemctl show -p MemoryMax -p ActiveState "+unit))
	} else {
		require.Contains(t, dir, "/kubepods/burstable/podlimits-")
		require.NotContains(t, dir, ".slice")
	}
}

// UpdateContainerResources changes the files of a running container.
func TestUpdateContainerResourcesOnCgroupV2(t *testing.T) {
	requireGuest(t)
	p := newPod(t, "update")
	id := p.container("main", []string{"sleep", "100000"}, `{"memory_limit_in_bytes":67108864,"cpu_period":100000,"cpu_quota":50000}`)
	dir := cgroupDir(t, id)
	sh(t, "crictl update --memory 100663296 --cpu-period 100000 --cpu-quota 20000 "+id)
	require.Equal(t, map[string]string{"memory.max": "100663296", "cpu.max": "20000 100000"},
		readCgroup(t, dir, "memory.max", "cpu.max"))
}

// With memory.oom.group=1 (what the kubelet sets on cgroup v2) an OOM kills every
// process of the container, so a shell waiting on a child ends, OOMKilled. Without
// it the kernel kills only the biggest process and the shell waits on.
func TestOOMKillsTheWholeGroup(t *testing.T) {
	requireGuest(t)
	p := newPod(t, "oom")
	script := []string{"sh", "-c", "sleep 100000 & tail /dev/zero; wait"}
	group := p.container("group", script, `{"memory_limit_in_bytes":33554432,"unified":{"memory.oom.group":"1"}}`)
	single := p.container("single", script, `{"memory_limit_in_bytes":33554432,"unified":{"memory.oom.group":"0"}}`)
	singleDir := cgroupDir(t, single)

	state := func(id string) string {
		return sh(t, `crictl inspect -o go-template --template '{{.status.state}} {{.status.reason}} {{.status.exitCode}}' `+id)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for state(group) == "CONTAINER_RUNNING  0" {
		require.True(t, time.Now().Before(deadline), "the OOM-killed group never exited")
		time.Sleep(2 * time.Second)
	}
	require.Equal(t, "CONTAINER_EXITED OOMKilled 137", state(group))

	// The single-process kill happened too (memory.events counts it), and its
	// shell and sleep still run.
	for !strings.Contains(sh(t, "cat "+singleDir+"/memory.events"), "oom_kill 1") {
		require.True(t, time.Now().Before(deadline), "no OOM kill in %s/memory.events", singleDir)
		time.Sleep(2 * time.Second)
	}
	require.Equal(t, "CONTAINER_RUNNING  0", state(single))
	require.Equal(t, "2", sh(t, "wc -l < "+singleDir+"/cgroup.procs"), "sh and sleep live on")
}

// Stats on cgroup v2 come from the container's own cgroup files: CPU and memory
// use, and the pressure (PSI) the kubelet 1.34+ reads.
func TestStatsOnCgroupV2(t *testing.T) {
	requireGuest(t)
	p := newPod(t, "stats")
	id := p.container("busy", []string{"sh", "-c", "while :; do :; done"}, `{"cpu_period":100000,"cpu_quota":20000,"memory_limit_in_bytes":67108864}`)
	time.Sleep(3 * time.Second)
	var stats struct {
		Stats []struct {
			CPU struct {
				UsageCoreNanoSeconds struct{ Value string } `json:"usageCoreNanoSeconds"`
				Psi                  *struct {
					Some, Full *struct{ Total string }
				} `json:"psi"`
			} `json:"cpu"`
			Memory struct {
				WorkingSetBytes struct{ Value string }                  `json:"workingSetBytes"`
				Psi             *struct{ Some *struct{ Total string } } `json:"psi"`
			} `json:"memory"`
		} `json:"stats"`
	}
	out := sh(t, "crictl stats -o json --id "+id)
	require.NoError(t, json.Unmarshal([]byte(out), &stats), out)
	require.Len(t, stats.Stats, 1, out)
	s := stats.Stats[0]
	usage, _ := strconv.ParseUint(s.CPU.UsageCoreNanoSeconds.Value, 10, 64)
	ws, _ := strconv.ParseUint(s.Memory.WorkingSetBytes.Value, 10, 64)
	require.Greater(t, usage, uint64(100_000_000), "a busy loop used more than 0.1 s of CPU: %s", out)
	require.Greater(t, ws, uint64(0), out)
	require.NotNil(t, s.CPU.Psi, "cpu PSI: %s", out)
	require.NotNil(t, s.CPU.Psi.Some, out)
	// Throttled at 20% of a CPU, the loop waits: some CPU pressure accrues.
	some, _ := strconv.ParseUint(s.CPU.Psi.Some.Total, 10, 64)
	require.Greater(t, some, uint64(0), "cpu.pressure some total: %s", out)
	require.NotNil(t, s.Memory.Psi, "memory PSI: %s", out)
}
