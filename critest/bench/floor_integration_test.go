//go:build integration

package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	bootapi "github.com/containerd/containerd/api/runtime/bootstrap/v1"
	taskv3 "github.com/containerd/containerd/api/runtime/task/v3"
	"github.com/containerd/ttrpc"
	"github.com/containernetworking/cni/libcni"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
	"github.com/shimd/shimd/network"
)

// floorSteps are the unavoidable steps of a one-container pod start, each timed on its
// own with nothing between it and the child process: what any CRI runtime built on
// containerd's runc shim, runc and CNI must pay at least.
var floorSteps = []string{"shim start", "runc pause", "CNI ADD", "runc container", "floor total"}

// floor runs the bare steps of a pod start from the bundles shimd made for a template
// pod: one `containerd-shim-runc-v2 start` (the exec and the shim daemon coming up to
// its socket, then shut down untimed), runc create + start of the pause bundle in a
// fresh network namespace, one CNI ADD of the same network list through libcni into
// that namespace, and runc create + start of the container bundle joining the pause
// process's namespaces. Each round tears everything down untimed.
type floor struct {
	dir, runcRoot, cgroupParent string
	tools                       harness.Toolset
	address                     string // containerd's socket, for the shim
	pauseSpec, ctrSpec          *specs.Spec
	cni                         *libcni.CNIConfig
	list                        *libcni.NetworkConfigList
	samples                     map[string][]time.Duration
	shimLog                     *os.File // the read end of the running shim's log FIFO
}

// newFloor copies the template pod's bundles (config.json and a copy of each rootfs,
// taken while the pod runs) out of containerd's state directory.
func newFloor(b *testing.B, p *pair, shimdNS, podID, ctrID string) *floor {
	b.Helper()
	f := &floor{
		dir:          b.TempDir(),
		tools:        harness.Tools(),
		address:      p.env.Containerd.Address(),
		cgroupParent: "shimd-floor" + strconv.Itoa(os.Getpid()),
		samples:      map[string][]time.Duration{},
	}
	f.runcRoot = filepath.Join(f.dir, "runc")
	b.Cleanup(func() { harness.RemoveEmptyCgroups(f.cgroupParent) })
	taskDir := filepath.Join(p.env.Containerd.State(), "io.containerd.runtime.v2.task", shimdNS)
	f.pauseSpec = f.copyBundle(b, filepath.Join(taskDir, podID), "pause")
	f.ctrSpec = f.copyBundle(b, filepath.Join(taskDir, ctrID), "container")

	list, err := libcni.ConfListFromFile(p.env.CNI.ConfPath)
	require.NoError(b, err)
	f.list = list
	f.cni = libcni.NewCNIConfigWithCacheDir([]string{harness.CNIBinDir}, filepath.Join(f.dir, "cni-cache"), nil)
	return f
}

// copyBundle reads a running task's config.json and copies its mounted rootfs.
func (f *floor) copyBundle(b *testing.B, bundle, name string) *specs.Spec {
	b.Helper()
	raw, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	require.NoError(b, err, "template bundle of %s", name)
	var spec specs.Spec
	require.NoError(b, json.Unmarshal(raw, &spec))
	rootfs := filepath.Join(f.dir, name+"-rootfs")
	out, err := exec.Command("cp", "-a", filepath.Join(bundle, "rootfs"), rootfs).CombinedOutput()
	require.NoError(b, err, "copy rootfs of %s: %s", name, out)
	spec.Root.Path = rootfs
	// No grouping annotations (the shim would attach to the template pod's shim) and
	// no hooks: only what runc itself does.
	spec.Annotations = nil
	spec.Hooks = nil
	return &spec
}

// round runs the steps once; negative rounds are warm-up.
func (f *floor) round(b *testing.B, round int) {
	b.Helper()
	id := fmt.Sprintf("floor-%d-%d", round+warmup, time.Now().UnixNano()%1e6)
	var total time.Duration
	timed := func(step string, fn func() error) {
		start := time.Now()
		err := fn()
		took := time.Since(start)
		require.NoError(b, err, "floor %s, round %d", step, round)
		total += took
		if round >= 0 {
			f.samples[step] = append(f.samples[step], took)
		}
	}

	// One shim start, for the pause bundle (the container's shares it on containerd 2.x).
	pauseBundle := f.writeBundle(b, id, f.pauseSpec, nil)
	var sock string
	timed("shim start", func() (err error) { sock, err = f.startShim(id, pauseBundle); return err })
	f.stopShim(b, id, sock)

	nsPath := filepath.Join(f.dir, "netns-"+id)
	require.NoError(b, network.CreateNetNS(nsPath))
	defer func() { require.NoError(b, network.RemoveNetNS(nsPath)) }()
	pauseBundle = f.writeBundle(b, id, f.pauseSpec, func(s *specs.Spec) { setNamespacePath(s, specs.NetworkNamespace, nsPath) })
	timed("runc pause", func() error { return f.runcRun(id, pauseBundle) })
	defer f.runcDelete(b, id)

	rt := &libcni.RuntimeConf{
		ContainerID: id, NetNS: nsPath, IfName: "eth0",
		Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "bench"}, {"K8S_POD_NAME", id}, {"K8S_POD_INFRA_CONTAINER_ID", id}},
	}
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()
	timed("CNI ADD", func() error { _, err := f.cni.AddNetworkList(ctx, f.list, rt); return err })
	defer func() { require.NoError(b, f.cni.DelNetworkList(ctx, f.list, rt)) }()

	pid := f.pid(b, id)
	cid := id + "-c"
	ctrBundle := f.writeBundle(b, cid, f.ctrSpec, func(s *specs.Spec) {
		for i, ns := range s.Linux.Namespaces {
			if ns.Path == "" {
				continue
			}
			if ns.Type == specs.NetworkNamespace {
				s.Linux.Namespaces[i].Path = nsPath
			} else {
				s.Linux.Namespaces[i].Path = fmt.Sprintf("/proc/%d/ns/%s", pid, filepath.Base(ns.Path))
			}
		}
	})
	timed("runc container", func() error { return f.runcRun(cid, ctrBundle) })
	defer f.runcDelete(b, cid)
	if round >= 0 {
		f.samples["floor total"] = append(f.samples["floor total"], total)
	}
}

// writeBundle writes a bundle directory for id with a copy of spec, edited by edit, in
// a cgroup of its own under the floor's parent.
func (f *floor) writeBundle(b *testing.B, id string, spec *specs.Spec, edit func(*specs.Spec)) string {
	b.Helper()
	raw, err := json.Marshal(spec)
	require.NoError(b, err)
	var s specs.Spec
	require.NoError(b, json.Unmarshal(raw, &s))
	s.Linux.CgroupsPath = "/" + f.cgroupParent + "/" + id
	if edit != nil {
		edit(&s)
	}
	dir := filepath.Join(f.dir, "bundle-"+id)
	require.NoError(b, os.MkdirAll(dir, 0o700))
	raw, err = json.Marshal(&s)
	require.NoError(b, err)
	require.NoError(b, os.WriteFile(filepath.Join(dir, "config.json"), raw, 0o600))
	return dir
}

func setNamespacePath(s *specs.Spec, typ specs.LinuxNamespaceType, path string) {
	for i, ns := range s.Linux.Namespaces {
		if ns.Type == typ {
			s.Linux.Namespaces[i].Path = path
			return
		}
	}
	s.Linux.Namespaces = append(s.Linux.Namespaces, specs.LinuxNamespace{Type: typ, Path: path})
}

// runcRun is `runc create` then `runc start`, as the shim runs them (the container's
// stdio is /dev/null; runc's own errors go to its log). A failure deletes what was made.
func (f *floor) runcRun(id, bundle string) error {
	logPath := filepath.Join(bundle, "runc.log")
	for _, args := range [][]string{
		{"create", "--bundle", bundle, "--pid-file", filepath.Join(bundle, "pid"), id},
		{"start", id},
	} {
		cmd := exec.Command(f.tools.Runc, append([]string{"--root", f.runcRoot, "--log", logPath}, args...)...)
		if err := cmd.Run(); err != nil {
			out, _ := os.ReadFile(logPath)
			_ = exec.Command(f.tools.Runc, "--root", f.runcRoot, "delete", "--force", id).Run()
			return fmt.Errorf("runc %s: %w: %s", args[0], err, out)
		}
	}
	return nil
}

func (f *floor) runcDelete(b *testing.B, id string) {
	b.Helper()
	out, err := exec.Command(f.tools.Runc, "--root", f.runcRoot, "delete", "--force", id).CombinedOutput()
	require.NoError(b, err, "runc delete %s: %s", id, out)
}

func (f *floor) pid(b *testing.B, id string) int {
	b.Helper()
	raw, err := os.ReadFile(filepath.Join(f.dir, "bundle-"+id, "pid"))
	require.NoError(b, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	require.NoError(b, err)
	return pid
}

// startShim runs `containerd-shim-runc-v2 ... start` in the bundle with containerd's
// bootstrap parameters on stdin, as containerd 2.4's shim manager does, and returns the
// socket the new shim daemon serves.
func (f *floor) startShim(id, bundle string) (string, error) {
	ns := "floor"
	params := &bootapi.BootstrapParams{
		InstanceID: id, Namespace: ns, LogLevel: bootapi.LogLevel_LOG_LEVEL_INFO,
		ContainerdGrpcAddress: f.address, ContainerdTtrpcAddress: f.address + ".ttrpc",
		ContainerdBinary: f.tools.Containerd,
	}
	in, err := proto.Marshal(params)
	if err != nil {
		return "", err
	}
	// containerd opens the read end of the shim's log FIFO first; the shim writes to it.
	logPath := filepath.Join(bundle, "log")
	if err := syscall.Mkfifo(logPath, 0o600); err != nil {
		return "", err
	}
	// Read-write, so that reads block instead of seeing EOF before the shim opens it.
	logR, err := os.OpenFile(logPath, os.O_RDWR, 0)
	if err != nil {
		return "", err
	}
	f.shimLog = logR
	go func() { _, _ = io.Copy(io.Discard, logR) }()
	cmd := exec.Command(f.tools.Shim, "-namespace", ns, "-address", f.address, "-publish-binary", f.tools.Containerd, "-id", id, "start")
	cmd.Dir = bundle
	cmd.Stdin = bytes.NewReader(in)
	cmd.Env = append(os.Environ(), "GOMAXPROCS=2", "TTRPC_ADDRESS="+f.address+".ttrpc", "GRPC_ADDRESS="+f.address, "NAMESPACE="+ns,
		"PATH="+f.tools.BinDir+":"+os.Getenv("PATH"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("shim start: %w: %s", err, stderr.String())
	}
	var res bootapi.BootstrapResult
	if err := proto.Unmarshal(out, &res); err != nil {
		return "", fmt.Errorf("shim start answer %q: %w", out, err)
	}
	return strings.TrimPrefix(res.Address, "unix://"), nil
}

// stopShim shuts the task-less shim down and waits for it to exit.
func (f *floor) stopShim(b *testing.B, id, sock string) {
	b.Helper()
	conn, err := net.DialTimeout("unix", sock, 5*time.Second)
	require.NoError(b, err)
	tc := ttrpc.NewClient(conn)
	defer tc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	task := taskv3.NewTTRPCTaskClient(tc)
	defer f.shimLog.Close()
	conn2, err := task.Connect(ctx, &taskv3.ConnectRequest{ID: id})
	if err != nil {
		// Do not leave it behind: its pid file is in the bundle.
		if raw, rerr := os.ReadFile(filepath.Join(f.dir, "bundle-"+id, "shim.pid")); rerr == nil {
			if pid, _ := strconv.Atoi(strings.TrimSpace(string(raw))); pid > 0 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	require.NoError(b, err, "connect to the floor shim")
	pid := int(conn2.ShimPid)
	_, _ = task.Shutdown(ctx, &taskv3.ShutdownRequest{ID: id, Now: true})
	require.Eventually(b, func() bool { return syscall.Kill(pid, 0) != nil }, 10*time.Second, 10*time.Millisecond, "shim %d did not exit", pid)
	_ = os.Remove(sock)
}

// reportFloor prints the floor steps and how far above the floor each runtime's pod
// start is.
func reportFloor(b *testing.B, f *floor, shimd, cd *target) {
	var out strings.Builder
	fmt.Fprintf(&out, "\nfloor: the bare steps of the same pod start with a pause container (same bundles, runc, shim binary and CNI list), %d rounds\n", len(f.samples["floor total"]))
	fmt.Fprintf(&out, "%-22s %10s %10s\n", "step", "p50", "p90")
	for _, s := range floorSteps {
		fmt.Fprintf(&out, "%-22s %8.1fms %8.1fms\n", s, ms(percentile(f.samples[s], 50)), ms(percentile(f.samples[s], 90)))
	}
	fl := ms(percentile(f.samples["floor total"], 50))
	s50, c50 := ms(percentile(shimd.samples["PodStart"], 50)), ms(percentile(cd.samples["PodStart"], 50))
	fmt.Fprintf(&out, "PodStart p50 above the floor: shimd %+.1fms (%.2fx floor), containerd %+.1fms (%.2fx floor)\n",
		s50-fl, s50/fl, c50-fl, c50/fl)
	b.ReportMetric(fl, "floor-podstart-p50-ms")
	fmt.Fprint(os.Stdout, out.String())
}

// templatePod starts a one-container pod through shimd for the floor's bundles and
// returns its sandbox and container ids; a cleanup removes it.
func templatePod(b *testing.B, tg *target) (string, string) {
	b.Helper()
	pod, cfg := podStartConfigs("floor-template")
	if pauseMode() == "when-needed" {
		// The floor is that of a pod with a pause container (containerd's kind): the
		// template pod shares its PID namespace so that shimd gives it one.
		ns := proto.Clone(pod.Linux.SecurityContext.NamespaceOptions).(*runtimeapi.NamespaceOption)
		ns.Pid = runtimeapi.NamespaceMode_POD
		pod.Linux.SecurityContext.NamespaceOptions = ns
	}
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()
	resp, err := tg.rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: pod})
	require.NoError(b, err)
	b.Cleanup(func() { require.NoError(b, tg.removePod(resp.PodSandboxId)) })
	c, err := tg.rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: resp.PodSandboxId, Config: cfg, SandboxConfig: pod})
	require.NoError(b, err)
	_, err = tg.rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: c.ContainerId})
	require.NoError(b, err)
	return resp.PodSandboxId, c.ContainerId
}

// reportSteps prints shimd's own per-step timing of the pod starts (from its log: the
// template pod, the warm-up and the rounds), beside the floor's steps: where shimd's
// time above the floor goes. RunPodSandbox's cni and task run concurrently.
func reportSteps(b *testing.B, shimdLog string) {
	raw, err := os.ReadFile(shimdLog)
	require.NoError(b, err)
	samples, order := stepSamples(string(raw), "sandbox ready", "container created", "container started")
	var out strings.Builder
	fmt.Fprintf(&out, "\nshimd per step (its log; RunPodSandbox's cni and task run side by side)\n")
	fmt.Fprintf(&out, "%-40s %10s %10s %6s\n", "step", "p50", "p90", "n")
	for _, k := range order {
		fmt.Fprintf(&out, "%-40s %8.2fms %8.2fms %6d\n", k, ms(percentile(samples[k], 50)), ms(percentile(samples[k], 90)), len(samples[k]))
	}
	fmt.Fprint(os.Stdout, out.String())
}
