//go:build integration

package kubelet

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/shimd/shimd/critest/harness"
)

// TestKubelet137Features runs, through a real kubelet with the gates of its newer
// CRI features on, pods that use each of them: a hostUsers: false pod with procMount
// Unmasked beside a Default container, an image volume and an emptyDir with bind
// mount options in it; a hostNetwork + hostUsers: false pod; a container that stops
// by its lifecycle stop signal. With EventedPLEG on and shimd's evented_pleg_status
// (no pod here has an init container: see docs/operating.md), the kubelet reads
// container statuses from PodSandboxStatus: shimd's request counter shows fewer
// ContainerStatus than PodSandboxStatus calls while the pods run.
func TestKubelet137Features(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the kubelet e2e test needs root")
	}
	if _, err := os.Stat(Binary()); err != nil {
		t.Skipf("no kubelet at %s: build it with hack/tools.sh kubelet (make e2e-kubelet)", Binary())
	}
	reg := harness.StartRegistry(t, harness.RegistryOptions{})
	base := harness.NewBaseDir(t)
	hosts := filepath.Join(base, "hosts")
	reg.WriteHermeticHostsDir(t, hosts)
	metricsSock := filepath.Join(base, "metrics.sock")
	env := harness.New(t, harness.Options{
		Shimd:       harness.ShimdOptions{ExtraConfig: fmt.Sprintf("evented_pleg_status = true\n[registry]\nconfig_path = %q\n[metrics]\naddress = %q\n", hosts, metricsSock)},
		LeakTimeout: time.Minute,
	})
	if env.Containerd.MajorVersion() < 2 {
		t.Skip("containerd 1.6 and runc 1.1 cannot run pod user namespaces")
	}
	s := &e2e{env: env, rt: env.Shimd.Runtime(t)}
	s.k = Start(t, Options{Dir: harness.NewBaseDir(t), RuntimeEndpoint: env.Shimd.Endpoint(), NodeName: "shimd-e2e-node",
		FeatureGates: map[string]bool{"EventedPLEG": true, "ContainerStopSignals": true, "VolumeBindMountOptions": true,
			"UserNamespacesHostNetworkSupport": true},
		// The log manager asks ContainerStatus of every container at each check: out
		// of the way, so that the count below is the pod status path's.
		Config: map[string]any{"containerLogMonitorInterval": "1h"}})
	t.Cleanup(func() {
		if t.Failed() {
			s.k.Stop()
			s.forceRemovePods(t)
		}
	})
	t.Logf("kubelet %s pid %d, log %s", Version(), s.k.PID(), s.k.LogPath)

	stopDir := filepath.Join(base, "stop")
	if err := os.Mkdir(stopDir, 0o777); err != nil {
		t.Fatal(err)
	}
	s.k.WritePod(t, usernsPod())
	s.k.WritePod(t, hostNetUsernsPod())
	s.k.WritePod(t, stopSignalPod(stopDir))
	s.k.WritePod(t, newPod("flapper", shell("flap1", BusyboxImage, "sleep 2; exit 1"),
		shell("flap2", BusyboxImage, "sleep 3; exit 1"), shell("steady", BusyboxImage, "exec sleep 3600")))

	hostNet, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	Eventually(t, 4*time.Minute, "the userns pod reports unmasked/masked /proc, id-mapped volumes and noexec", func() error {
		return logHas(s.k, "userns", "check", "unmasked=0 masked=1 imgowner=0 emptydirowner=0 noexec=denied mappedroot=yes")
	})
	Eventually(t, 2*time.Minute, "the hostNetwork userns pod is in the node's network and its own user namespace", func() error {
		return logHas(s.k, "hostnet-userns", "check", "net="+hostNet+" mappedroot=yes sys=ro")
	})
	Eventually(t, 2*time.Minute, "the stop-signal pod runs and reports its stop signal", func() error {
		p, err := s.k.Pod("stopsig")
		if err != nil {
			return err
		}
		if err := running(p, false, "app"); err != nil {
			return err
		}
		if cs := containerStatus(p, "app"); cs.StopSignal == nil || *cs.StopSignal != corev1.SIGUSR1 {
			return fmt.Errorf("status stopSignal %v", cs.StopSignal)
		}
		return logHas(s.k, "stopsig", "app", "ready")
	})

	// Evented PLEG: on each container event (two of flapper's three containers exit
	// every few seconds and are restarted) the kubelet reads the pod's status with
	// PodSandboxStatus; with its timestamp set, the containers' statuses come with
	// it. Without (the kubelet's fallback) each PodSandboxStatus would be followed by
	// a ContainerStatus call for every container of the pod, at least 3. The
	// kubelet's container GC asks ContainerStatus of each dead container it removes
	// (about one per restart, while each restart is at least two events), which
	// is why the count is compared rather than required to be 0.
	before := rpcCount(t, metricsSock, "ContainerStatus")
	sandboxBefore := rpcCount(t, metricsSock, "PodSandboxStatus")
	time.Sleep(30 * time.Second)
	calls := rpcCount(t, metricsSock, "ContainerStatus") - before
	sandboxCalls := rpcCount(t, metricsSock, "PodSandboxStatus") - sandboxBefore
	t.Logf("in 30 s with 4 pods, one restarting: %v ContainerStatus, %v PodSandboxStatus calls", calls, sandboxCalls)
	if sandboxCalls == 0 {
		harness.Errorf(t, "no PodSandboxStatus call in 30 s: the kubelet saw no container event")
	}
	if calls >= sandboxCalls {
		harness.Errorf(t, "the kubelet made %v ContainerStatus calls for %v PodSandboxStatus calls in 30 s: it falls back to one per container", calls, sandboxCalls)
	}

	// The stop signal: removing the manifest stops "app" with SIGUSR1, well before
	// its 30 s grace period ends in SIGKILL.
	start := time.Now()
	s.k.RemovePod(t, "stopsig")
	Eventually(t, time.Minute, "app recorded its SIGUSR1", func() error {
		b, err := os.ReadFile(filepath.Join(stopDir, "stopped"))
		if err != nil || !strings.Contains(string(b), "got-usr1") {
			return fmt.Errorf("stopped file: %q %v", b, err)
		}
		return nil
	})
	if d := time.Since(start); d > 25*time.Second {
		harness.Errorf(t, "app took %s to stop: not by its stop signal", d)
	}
	s.k.RemovePod(t, "userns")
	s.k.RemovePod(t, "hostnet-userns")
	s.k.RemovePod(t, "flapper")
	Eventually(t, 3*time.Minute, "every pod is gone from CRI", func() error {
		pods, err := s.rt.ListPodSandbox(context.Background(), nil)
		if err != nil {
			return err
		}
		if n := len(pods.Items); n != 0 {
			return fmt.Errorf("%d sandboxes left", n)
		}
		return nil
	})
}

func logHas(k *Kubelet, pod, container, want string) error {
	out, err := k.ContainerLogs(pod, container, LogOptions{})
	if err == nil && strings.Contains(out, want) {
		return nil
	}
	// Say what the kubelet knows of the container.
	var state string
	if p, perr := k.Pod(pod); perr == nil {
		if cs := containerStatus(p, container); cs != nil {
			state = fmt.Sprintf("%s, last %s", stateString(cs.State), stateString(cs.LastTerminationState))
		}
	}
	return fmt.Errorf("log %q (%v); container %s", out, err, state)
}

// rpcCount reads shimd_rpc_requests_total of one RPC (all codes) from shimd's
// metrics socket.
func rpcCount(t *testing.T, sock, rpc string) float64 {
	t.Helper()
	c := harness.UnixHTTPClient(sock, 0)
	resp, err := c.Get("http://shimd/metrics")
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		l := sc.Text()
		if !strings.HasPrefix(l, "shimd_rpc_requests_total{") || !strings.Contains(l, `rpc="`+rpc+`"`) {
			continue
		}
		f := strings.Fields(l)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", l, err)
		}
		sum += v
	}
	return sum
}

// checkScript prints facts a container learns about itself on one line, then sleeps.
const mappedRoot = `m=$(awk '$1==0{print $2}' /proc/self/uid_map); [ "$m" != 0 ] && echo yes || echo no`

// usernsPod: hostUsers false; "check" has procMount Unmasked, an image volume and an
// emptyDir with bindMountOptions noexec; "masked" has the Default procMount.
func usernsPod() *corev1.Pod {
	unmasked, hostUsers := corev1.UnmaskedProcMount, false
	check := shell("check", BusyboxImage, `
u=$(grep -c ' /proc/timer_list ' /proc/self/mountinfo)
m=$(cat /shared/masked 2>/dev/null || echo none)
while [ "$m" = none ]; do sleep 0.2; m=$(cat /shared/masked 2>/dev/null || echo none); done
cp /bin/busybox /scratch/bb
/scratch/bb true 2>/dev/null && x=allowed || x=denied
echo "unmasked=$u masked=$m imgowner=$(stat -c %u /img/bin/busybox) emptydirowner=$(stat -c %u /scratch) noexec=$x mappedroot=$(`+mappedRoot+`)"
exec sleep 3600`)
	check.SecurityContext = &corev1.SecurityContext{ProcMount: &unmasked}
	check.VolumeMounts = []corev1.VolumeMount{{Name: "img", MountPath: "/img"}, {Name: "shared", MountPath: "/shared"},
		{Name: "scratch", MountPath: "/scratch", BindMountOptions: []string{"noexec", "nosuid", "nodev"}}}
	// Written whole, then renamed: "check" reads the file as soon as it exists, and a
	// redirection creates it empty before grep writes its count.
	masked := shell("masked", BusyboxImage, `grep -c ' /proc/timer_list ' /proc/self/mountinfo > /shared/masked.tmp; mv /shared/masked.tmp /shared/masked; exec sleep 3600`)
	masked.VolumeMounts = []corev1.VolumeMount{{Name: "shared", MountPath: "/shared"}}
	p := newPod("userns", check, masked)
	p.Spec.HostUsers = &hostUsers
	p.Spec.Volumes = []corev1.Volume{emptyDir("shared"), emptyDir("scratch"), {Name: "img", VolumeSource: corev1.VolumeSource{
		Image: &corev1.ImageVolumeSource{Reference: BusyboxImage, PullPolicy: corev1.PullIfNotPresent}}}}
	return p
}

// hostNetUsernsPod: hostNetwork with hostUsers false.
func hostNetUsernsPod() *corev1.Pod {
	hostUsers := false
	check := shell("check", BusyboxImage, `
ro=$(awk '$5=="/sys"{print $6}' /proc/self/mountinfo | tr , '\n' | grep -x ro)
echo "net=$(readlink /proc/self/ns/net) mappedroot=$(`+mappedRoot+`) sys=$ro"
exec sleep 3600`)
	p := newPod("hostnet-userns", check)
	p.Spec.HostNetwork, p.Spec.HostUsers = true, &hostUsers
	return p
}

// stopSignalPod: "app" ignores SIGTERM and records SIGUSR1, its lifecycle stop
// signal, in a host directory; its grace period is 30 s.
func stopSignalPod(dir string) *corev1.Pod {
	app := shell("app", BusyboxImage, `trap 'echo got-usr1 > /out/stopped; exit 0' USR1; trap '' TERM; echo ready
while :; do sleep 0.2; done`)
	sig := corev1.SIGUSR1
	app.Lifecycle = &corev1.Lifecycle{StopSignal: &sig}
	app.VolumeMounts = []corev1.VolumeMount{{Name: "out", MountPath: "/out"}}
	p := newPod("stopsig", app)
	grace := int64(30)
	p.Spec.TerminationGracePeriodSeconds = &grace
	p.Spec.OS = &corev1.PodOS{Name: corev1.Linux}
	p.Spec.Volumes = []corev1.Volume{{Name: "out", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir}}}}
	return p
}
