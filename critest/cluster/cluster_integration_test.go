//go:build integration

package cluster

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shimd/shimd/critest/harness"
	"github.com/shimd/shimd/critest/kubelet"
)

func TestMain(m *testing.M) { harness.Main(m) }

const (
	busybox     = "docker.io/library/busybox:latest"
	busybox136  = "docker.io/library/busybox:1.36" // the same bytes under another name: a new rollout
	nginx       = "registry.k8s.io/e2e-test-images/nginx:1.14-2"
	altHandler  = "alt" // a second runtime handler of shimd's config, for the RuntimeClass
	ns          = "e2e"
	stepTimeout = 3 * time.Minute
)

// e2e is what the steps of TestCluster share.
type e2e struct {
	env   *harness.Env
	c     *Cluster
	runsc bool // the runsc handler is configured (hack/tools.sh runsc)
}

// TestCluster runs a one-node cluster on shimd and drives it with kubectl the way a
// user does, step by step; each step waits with a deadline.
func TestCluster(t *testing.T) {
	s := startCluster(t)
	t.Run("1_kubectl_run", s.stepRun)
	t.Run("2_deployment_scale_rollout", s.stepDeployment)
	t.Run("3_job", s.stepJob)
	t.Run("4_logs_exec_attach_cp", s.stepStreams)
	t.Run("5_port_forward", s.stepPortForward)
	t.Run("6_probe_init_hostnetwork_runtimeclass", s.stepPodFeatures)
	t.Run("6b_runtimeclass_gvisor", s.stepGVisor)
	t.Run("7_delete_with_grace_period", s.stepGracefulDelete)
	t.Run("7b_checkpoint_api_and_restore", s.stepCheckpointRestore)
	t.Run("8_kill9_shimd_during_rollout", s.stepKill9DuringRollout)
	t.Run("9_namespace_deleted_nothing_left", s.stepTeardown)
}

// startCluster starts shimd (with the registry's hosts and the alt handler), the
// one-node cluster on it, and creates the test namespace.
func startCluster(t *testing.T) *e2e {
	if os.Geteuid() != 0 {
		t.Skip("the cluster e2e test needs root")
	}
	if _, err := os.Stat(kubelet.Binary()); err != nil {
		t.Skipf("no kubelet at %s: make e2e-cluster builds it", kubelet.Binary())
	}
	reg := harness.StartRegistry(t, harness.RegistryOptions{})
	hosts := filepath.Join(harness.NewBaseDir(t), "hosts")
	reg.WriteHermeticHostsDir(t, hosts)
	haveRunsc, _ := harness.Tools().HaveRunsc()
	env := harness.New(t, harness.Options{
		Shimd: harness.ShimdOptions{Runsc: haveRunsc, ExtraConfig: fmt.Sprintf("[registry]\nconfig_path = %q\n\n[runtimes.%s]\ntype = \"io.containerd.runc.v2\"\nbinary_name = %q\nroot = %q\n",
			hosts, altHandler, harness.Tools().Runc, filepath.Join(harness.NewBaseDir(t), "runc-alt"))},
		LeakTimeout: time.Minute,
	})
	s := &e2e{env: env, runsc: haveRunsc}
	start := time.Now()
	// The node's address is the test network's gateway: on the host, in 198.18.0.0/15.
	s.c = Start(t, Options{RuntimeEndpoint: env.Shimd.Endpoint(), NodeIP: env.CNI.Gateway.String()})
	t.Logf("cluster up, node Ready in %s (API server %s, kubeconfig %s)", time.Since(start).Round(time.Millisecond), s.c.Server, s.c.Kubeconfig)
	// On failure, stop the kubelet and take its pods down through CRI, so that the
	// harness's leak check reports what the failed step left, not the running pods.
	t.Cleanup(func() {
		if t.Failed() {
			s.c.Kubelet.Stop()
			s.forceRemovePods(t)
		}
	})
	s.kubectl(t, "create", "namespace", ns)
	return s
}

func (s *e2e) kubectl(t testing.TB, args ...string) string {
	t.Helper()
	out, err := s.c.Kubectl(t, args...)
	if err != nil {
		harness.Fatalf(t, "%v\n%s", err, out)
	}
	return out
}

// jsonpath reads one field of an object in the test namespace.
func (s *e2e) jsonpath(t testing.TB, kind, name, path string) (string, error) {
	return s.c.Kubectl(t, "-n", ns, "get", kind, name, "-o", "jsonpath="+path)
}

// podPhase waits until the pod has phase want.
func (s *e2e) waitPhase(t testing.TB, pod, want string) {
	t.Helper()
	s.c.WaitFor(t, stepTimeout, "pod "+pod+" "+want, func() error {
		got, err := s.jsonpath(t, "pod", pod, "{.status.phase}")
		if err != nil {
			return err
		}
		if got != want {
			return fmt.Errorf("phase %q", got)
		}
		return nil
	})
}

// Step 1: kubectl run makes a pod the scheduler binds to the node and shimd runs.
func (s *e2e) stepRun(t *testing.T) {
	s.kubectl(t, "-n", ns, "run", "hello", "--image", busybox, "--restart", "Never", "--", "sh", "-c", "echo hello from shimd; sleep 3600")
	s.waitPhase(t, "hello", "Running")
	node, _ := s.jsonpath(t, "pod", "hello", "{.spec.nodeName}")
	if node != s.c.NodeName {
		harness.Errorf(t, "pod on node %q, want %q", node, s.c.NodeName)
	}
	ip, _ := s.jsonpath(t, "pod", "hello", "{.status.podIP}")
	if !strings.HasPrefix(ip, "198.1") {
		harness.Errorf(t, "pod IP %q is not in the test range", ip)
	}
	s.c.WaitFor(t, time.Minute, "kubectl logs hello", func() error {
		out, err := s.c.Kubectl(t, "-n", ns, "logs", "hello")
		if err != nil || !strings.Contains(out, "hello from shimd") {
			return fmt.Errorf("logs %q: %v", out, err)
		}
		return nil
	})
}

func deployment(name, image string, replicas int) string {
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata: {name: %[1]s, namespace: %[4]s}
spec:
  replicas: %[3]d
  selector: {matchLabels: {app: %[1]s}}
  strategy: {type: RollingUpdate, rollingUpdate: {maxUnavailable: 1, maxSurge: 1}}
  template:
    metadata: {labels: {app: %[1]s}}
    spec:
      terminationGracePeriodSeconds: 2
      containers:
      - name: main
        image: %[2]s
        command: ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"]
`, name, image, replicas, ns)
}

// waitAvailable waits until the deployment's rollout is complete with n replicas.
func (s *e2e) waitAvailable(t testing.TB, name string, n int) {
	t.Helper()
	s.c.WaitFor(t, stepTimeout, fmt.Sprintf("deployment %s: %d available, rollout complete", name, n), func() error {
		out, err := s.jsonpath(t, "deployment", name, "{.status.availableReplicas}/{.status.updatedReplicas}/{.status.replicas}/{.status.observedGeneration}/{.metadata.generation}")
		if err != nil {
			return err
		}
		f := strings.Split(out, "/")
		want := strconv.Itoa(n)
		if len(f) != 5 || f[0] != want || f[1] != want || f[2] != want || f[3] != f[4] {
			return fmt.Errorf("available/updated/replicas/observed/generation = %s", out)
		}
		return nil
	})
}

// Step 2: a Deployment of 3 becomes available, scales to 6 and back to 3, and rolls
// out a new image.
func (s *e2e) stepDeployment(t *testing.T) {
	s.c.Apply(t, deployment("web", busybox, 3))
	s.waitAvailable(t, "web", 3)
	s.kubectl(t, "-n", ns, "scale", "deployment/web", "--replicas", "6")
	s.waitAvailable(t, "web", 6)
	s.kubectl(t, "-n", ns, "scale", "deployment/web", "--replicas", "3")
	s.waitAvailable(t, "web", 3)
	s.kubectl(t, "-n", ns, "set", "image", "deployment/web", "main="+busybox136)
	s.kubectl(t, "-n", ns, "rollout", "status", "deployment/web", "--timeout", "3m")
	s.waitAvailable(t, "web", 3)
	s.waitRolledOut(t, busybox136, 3)
}

// waitRolledOut waits until web's pods are exactly n, all with image (the old ones
// have terminated and are gone).
func (s *e2e) waitRolledOut(t testing.TB, image string, n int) {
	t.Helper()
	s.c.WaitFor(t, stepTimeout, "the old pods gone after the rollout", func() error {
		images, err := s.c.Kubectl(t, "-n", ns, "get", "pods", "-l", "app=web", "-o", "jsonpath={.items[*].spec.containers[0].image}")
		if err != nil {
			return err
		}
		f := strings.Fields(images)
		if len(f) != n || slices.ContainsFunc(f, func(i string) bool { return i != image }) {
			return fmt.Errorf("pods' images: %s", images)
		}
		return nil
	})
}

// Step 3: a Job's pod runs to completion and the Job is Complete.
func (s *e2e) stepJob(t *testing.T) {
	s.c.Apply(t, fmt.Sprintf(`apiVersion: batch/v1
kind: Job
metadata: {name: count, namespace: %s}
spec:
  completions: 2
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      containers:
      - {name: main, image: %s, command: ["sh", "-c", "for i in 1 2 3; do echo $i; done"]}
`, ns, busybox))
	s.kubectl(t, "-n", ns, "wait", "--for=condition=complete", "job/count", "--timeout=3m")
	pods := strings.Fields(s.kubectl(t, "-n", ns, "get", "pods", "-l", "job-name=count", "-o", "jsonpath={.items[*].metadata.name}"))
	if len(pods) != 2 {
		harness.Fatalf(t, "job pods: %v", pods)
	}
	for _, p := range pods {
		if out := s.kubectl(t, "-n", ns, "logs", p); out != "1\n2\n3" {
			harness.Errorf(t, "job pod %s log %q", p, out)
		}
	}
}

// Step 4: kubectl logs (-f, --previous after a restart), exec (a command and a shell
// over a pty), attach and cp, all through the API server, the kubelet and shimd's
// streaming server.
func (s *e2e) stepStreams(t *testing.T) {
	s.c.Apply(t, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: talk, namespace: %s}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: %s
    stdin: true
    tty: false
    command: ["sh", "-c", "i=0; while true; do i=$((i+1)); echo tick $i; read -t 1 line && echo got: $line; [ -e /tmp/stop ] && exit 1; done"]
`, ns, busybox))
	s.waitPhase(t, "talk", "Running")

	// exec of a command, with its exit code
	if out := s.kubectl(t, "-n", ns, "exec", "talk", "--", "sh", "-c", "echo $((6*7)); hostname"); out != "42\ntalk" {
		harness.Errorf(t, "exec output %q", out)
	}
	if _, err := s.c.Kubectl(t, "-n", ns, "exec", "talk", "--", "sh", "-c", "exit 3"); err == nil || !strings.Contains(err.Error(), "exit status 3") {
		harness.Errorf(t, "exec exit 3: %v", err)
	}
	// an interactive shell over a pty: kubectl -it needs a terminal of its own, which
	// script(1) gives it; the remote side gets a tty too.
	ectx, ecancel := context.WithTimeout(context.Background(), time.Minute)
	defer ecancel()
	kc := s.c.KubectlCmd(ectx, "-n", ns, "exec", "-i", "-t", "talk", "--", "sh")
	shell := exec.CommandContext(ectx, "script", "-q", "-e", "-c", shellJoin(kc.Args), "/dev/null")
	shell.Env = kc.Env
	shell.Stdin = &slowReader{lines: []string{"tty; echo pty-$((40+2))\n", "exit\n"}}
	raw, err := shell.CombinedOutput()
	if out := string(raw); err != nil || !strings.Contains(out, "/dev/pts/") || !strings.Contains(out, "pty-42") {
		harness.Errorf(t, "exec -it: %q %v", out, err)
	}

	// logs -f streams new lines
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	follow := s.c.KubectlCmd(ctx, "-n", ns, "logs", "-f", "talk")
	pipe, _ := follow.StdoutPipe()
	if err := follow.Start(); err != nil {
		harness.Fatalf(t, "%v", err)
	}
	sc := bufio.NewScanner(pipe)
	seen := map[string]bool{}
	for sc.Scan() && len(seen) < 3 {
		if strings.HasPrefix(sc.Text(), "tick ") {
			seen[sc.Text()] = true
		}
	}
	cancel()
	_ = follow.Wait()
	if len(seen) < 3 {
		harness.Errorf(t, "logs -f gave %d tick lines", len(seen))
	}

	// attach: what we write reaches the container's stdin, its answer comes back
	actx, acancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer acancel()
	attach := s.c.KubectlCmd(actx, "-n", ns, "attach", "-i", "talk", "-c", "main")
	in, _ := attach.StdinPipe()
	aout, _ := attach.StdoutPipe()
	if err := attach.Start(); err != nil {
		harness.Fatalf(t, "%v", err)
	}
	go func() {
		for actx.Err() == nil {
			_, _ = io.WriteString(in, "ping-through-attach\n")
			time.Sleep(500 * time.Millisecond)
		}
	}()
	asc := bufio.NewScanner(aout)
	got := false
	for asc.Scan() {
		if strings.Contains(asc.Text(), "got: ping-through-attach") {
			got = true
			break
		}
	}
	acancel()
	_ = attach.Wait()
	if !got {
		harness.Errorf(t, "attach: the container never echoed our line")
	}

	// cp both ways (tar through exec)
	local := filepath.Join(t.TempDir(), "f.txt")
	if err := os.WriteFile(local, []byte("copied by kubectl cp\n"), 0o644); err != nil {
		harness.Fatalf(t, "%v", err)
	}
	s.kubectl(t, "-n", ns, "cp", local, "talk:/tmp/f.txt")
	if out := s.kubectl(t, "-n", ns, "exec", "talk", "--", "cat", "/tmp/f.txt"); out != "copied by kubectl cp" {
		harness.Errorf(t, "cp into the pod: %q", out)
	}
	back := filepath.Join(t.TempDir(), "back.txt")
	s.kubectl(t, "-n", ns, "cp", "talk:/tmp/f.txt", back)
	if b, err := os.ReadFile(back); err != nil || string(b) != "copied by kubectl cp\n" {
		harness.Errorf(t, "cp out of the pod: %q %v", b, err)
	}

	// --previous after a restart: the container exits, the kubelet restarts it.
	s.kubectl(t, "-n", ns, "exec", "talk", "--", "touch", "/tmp/stop")
	s.c.WaitFor(t, stepTimeout, "talk restarted", func() error {
		n, err := s.jsonpath(t, "pod", "talk", "{.status.containerStatuses[0].restartCount}")
		if err != nil || n != "1" {
			return fmt.Errorf("restartCount %q %v", n, err)
		}
		return nil
	})
	s.c.WaitFor(t, time.Minute, "logs --previous", func() error {
		prev, err := s.c.Kubectl(t, "-n", ns, "logs", "talk", "--previous")
		if err != nil || !strings.Contains(prev, "got: ping-through-attach") {
			return fmt.Errorf("--previous %q: %v", prev, err)
		}
		return nil
	})
}

// shellJoin quotes args for sh -c.
func shellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

// slowReader gives its lines one per second, as a person types (a shell that reads
// ahead of its prompt would otherwise swallow them).
type slowReader struct{ lines []string }

func (r *slowReader) Read(p []byte) (int, error) {
	if len(r.lines) == 0 {
		return 0, io.EOF
	}
	time.Sleep(time.Second)
	n := copy(p, r.lines[0])
	r.lines[0] = r.lines[0][n:]
	if r.lines[0] == "" {
		r.lines = r.lines[1:]
	}
	return n, nil
}

// Step 5: kubectl port-forward to a pod's port.
func (s *e2e) stepPortForward(t *testing.T) {
	s.c.Apply(t, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: nginx, namespace: %s}
spec:
  containers:
  - {name: main, image: %s, ports: [{containerPort: 80}]}
`, ns, nginx))
	s.waitPhase(t, "nginx", "Running")
	port := kubelet.FreePort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pf := s.c.KubectlCmd(ctx, "-n", ns, "port-forward", "pod/nginx", fmt.Sprintf("%d:80", port))
	if err := pf.Start(); err != nil {
		harness.Fatalf(t, "%v", err)
	}
	defer func() { cancel(); _ = pf.Wait() }()
	s.c.WaitFor(t, time.Minute, "GET through port-forward", func() error {
		return httpOK(http.DefaultClient, fmt.Sprintf("http://127.0.0.1:%d/", port))
	})
}

// Step 6: a liveness probe restarts a container, an init container runs first, a
// hostNetwork pod sees the host's interfaces, and a RuntimeClass pod runs on the
// second handler.
func (s *e2e) stepPodFeatures(t *testing.T) {
	s.c.Apply(t, fmt.Sprintf(`apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: alt}
handler: %[3]s
---
apiVersion: v1
kind: Pod
metadata: {name: probed, namespace: %[1]s}
spec:
  containers:
  - name: main
    image: %[2]s
    command: ["sh", "-c", "touch /tmp/alive; sleep 8; rm /tmp/alive; sleep 3600"]
    livenessProbe:
      exec: {command: ["test", "-e", "/tmp/alive"]}
      periodSeconds: 1
      failureThreshold: 2
---
apiVersion: v1
kind: Pod
metadata: {name: withinit, namespace: %[1]s}
spec:
  initContainers:
  - {name: init, image: %[2]s, command: ["sh", "-c", "echo made-by-init > /work/f"], volumeMounts: [{name: w, mountPath: /work}]}
  containers:
  - {name: main, image: %[2]s, command: ["sh", "-c", "cat /work/f; sleep 3600"], volumeMounts: [{name: w, mountPath: /work}]}
  volumes: [{name: w, emptyDir: {}}]
---
apiVersion: v1
kind: Pod
metadata: {name: hostnet, namespace: %[1]s}
spec:
  hostNetwork: true
  containers:
  - {name: main, image: %[2]s, command: ["sleep", "3600"]}
---
apiVersion: v1
kind: Pod
metadata: {name: alt, namespace: %[1]s}
spec:
  runtimeClassName: alt
  containers:
  - {name: main, image: %[2]s, command: ["sleep", "3600"]}
`, ns, busybox, altHandler))
	for _, p := range []string{"withinit", "hostnet", "alt"} {
		s.waitPhase(t, p, "Running")
	}
	s.c.WaitFor(t, stepTimeout, "the liveness probe restarts probed", func() error {
		n, err := s.jsonpath(t, "pod", "probed", "{.status.containerStatuses[0].restartCount}")
		if err != nil || n == "" || n == "0" {
			return fmt.Errorf("restartCount %q %v", n, err)
		}
		return nil
	})
	s.c.WaitFor(t, time.Minute, "withinit's log", func() error {
		out, err := s.c.Kubectl(t, "-n", ns, "logs", "withinit", "-c", "main")
		if err != nil || out != "made-by-init" {
			return fmt.Errorf("%q %v", out, err)
		}
		return nil
	})
	hostIP, _ := s.jsonpath(t, "pod", "hostnet", "{.status.podIP}")
	if hostIP != s.env.CNI.Gateway.String() {
		harness.Errorf(t, "hostNetwork pod IP %q, want the node IP %s", hostIP, s.env.CNI.Gateway)
	}
	links := s.kubectl(t, "-n", ns, "exec", "hostnet", "--", "ip", "link")
	if !strings.Contains(links, s.env.CNI.Bridge) {
		harness.Errorf(t, "hostNetwork pod does not see the host's bridge %s:\n%s", s.env.CNI.Bridge, links)
	}
	// The alt pod's sandbox runs on the alt handler: shimd reports it.
	out, err := s.env.Shimd.Crictl(t, "pods", "--name", "alt", "--namespace", ns, "-o", "json")
	var pods struct {
		Items []struct{ RuntimeHandler string }
	}
	if err == nil {
		err = json.Unmarshal([]byte(out), &pods)
	}
	if err != nil || len(pods.Items) != 1 || pods.Items[0].RuntimeHandler != altHandler {
		harness.Errorf(t, "crictl pods for alt: %v\n%s", err, out)
	}
}

// Step 6b: a RuntimeClass pod on gVisor (handler runsc) next to a runc pod on the one
// node: from inside, the gVisor pod sees gVisor's kernel, the runc pod the host's.
func (s *e2e) stepGVisor(t *testing.T) {
	if !s.runsc {
		_, why := harness.Tools().HaveRunsc()
		t.Skip(why)
	}
	s.c.Apply(t, fmt.Sprintf(`apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: gvisor}
handler: %[3]s
---
apiVersion: v1
kind: Pod
metadata: {name: sentry, namespace: %[1]s}
spec:
  runtimeClassName: gvisor
  containers:
  - {name: main, image: %[2]s, command: ["sh", "-c", "uname -a; dmesg | head -1; sleep 3600"]}
`, ns, busybox, harness.RunscHandler))
	s.waitPhase(t, "sentry", "Running")
	s.c.WaitFor(t, time.Minute, "the gVisor pod's kernel", func() error {
		out, err := s.c.Kubectl(t, "-n", ns, "logs", "sentry")
		if err != nil || !strings.Contains(out, "gvisor") || !strings.Contains(out, "Starting gVisor") {
			return fmt.Errorf("%q %v", out, err)
		}
		return nil
	})
	host := s.kubectl(t, "-n", ns, "exec", "hello", "--", "uname", "-r")
	if strings.Contains(host, "gvisor") {
		harness.Errorf(t, "the runc pod sees %q", host)
	}
	s.kubectl(t, "-n", ns, "delete", "pod", "sentry", "--grace-period", "1", "--wait=true", "--timeout=2m")
	s.kubectl(t, "delete", "runtimeclass", "gvisor")
}

// Step 7: kubectl delete with a grace period the container honours: it gets SIGTERM,
// says so, and exits before the grace period is over.
func (s *e2e) stepGracefulDelete(t *testing.T) {
	s.c.Apply(t, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: graceful, namespace: %s}
spec:
  terminationGracePeriodSeconds: 30
  containers:
  - name: main
    image: %s
    command: ["sh", "-c", "trap 'echo got SIGTERM > /dev/termination-log; sleep 2; exit 0' TERM; while true; do sleep 1; done"]
`, ns, busybox))
	s.waitPhase(t, "graceful", "Running")
	cid, _ := s.jsonpath(t, "pod", "graceful", "{.status.containerStatuses[0].containerID}")
	start := time.Now()
	s.kubectl(t, "-n", ns, "delete", "pod", "graceful", "--grace-period", "20", "--wait=true", "--timeout=2m")
	took := time.Since(start)
	// It took the container's 2 s, not the 20 s grace period nor nothing.
	if took < 2*time.Second || took > 18*time.Second {
		harness.Errorf(t, "delete took %s: the container did not get SIGTERM and its time", took)
	}
	t.Logf("graceful delete of %s took %s", cid, took.Round(time.Millisecond))
}

// Step 8: kill -9 shimd while a rollout runs and start it again: the rollout
// finishes, and no container that was running is restarted or duplicated.
func (s *e2e) stepKill9DuringRollout(t *testing.T) {
	before := s.runningContainers(t)
	s.kubectl(t, "-n", ns, "set", "image", "deployment/web", "main="+busybox)
	time.Sleep(1500 * time.Millisecond) // the first new pod is being created
	s.env.Shimd.Kill9()
	time.Sleep(2 * time.Second)
	s.env.Shimd.Start(t)
	s.kubectl(t, "-n", ns, "rollout", "status", "deployment/web", "--timeout", "4m")
	s.waitAvailable(t, "web", 3)
	s.waitRolledOut(t, busybox, 3)
	after := s.runningContainers(t)
	for pod, c := range before {
		if strings.HasPrefix(pod, "web-") {
			continue // replaced by the rollout
		}
		a, ok := after[pod]
		if !ok {
			harness.Errorf(t, "pod %s is gone after the restart of shimd", pod)
			continue
		}
		if a != c {
			harness.Errorf(t, "pod %s: container %s before, %s after the restart of shimd", pod, c, a)
		}
	}
	// No duplicates: CRI lists exactly one running container per running pod container.
	out, err := s.env.Shimd.Crictl(t, "ps", "-q", "--state", "running")
	if err != nil {
		harness.Fatalf(t, "%v", err)
	}
	n := len(strings.Fields(out))
	want := len(after)
	if n != want {
		harness.Errorf(t, "shimd runs %d containers, the API server knows %d running ones: %v", n, want, after)
	}
}

// runningContainers maps pod/container to "containerID restartCount" for every running
// container in the namespace.
func (s *e2e) runningContainers(t testing.TB) map[string]string {
	t.Helper()
	var list struct {
		Items []struct {
			Metadata struct{ Name string }
			Status   struct {
				ContainerStatuses []struct {
					Name         string
					ContainerID  string
					RestartCount int
					State        struct{ Running *struct{} }
				}
			}
		}
	}
	out := s.kubectl(t, "-n", ns, "get", "pods", "-o", "json")
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		harness.Fatalf(t, "kubectl get pods -o json: %v", err)
	}
	m := map[string]string{}
	for _, p := range list.Items {
		for _, c := range p.Status.ContainerStatuses {
			if c.State.Running != nil {
				m[p.Metadata.Name+"/"+c.Name] = fmt.Sprintf("%s %d", c.ContainerID, c.RestartCount)
			}
		}
	}
	return m
}

// Step 9: deleting the namespace removes every pod; shimd has no pod left and the
// harness's leak check (netns, IP leases, mounts, containers, shims) runs after.
func (s *e2e) stepTeardown(t *testing.T) {
	s.kubectl(t, "delete", "runtimeclass", "alt", "--ignore-not-found")
	s.kubectl(t, "delete", "namespace", ns, "--timeout=4m")
	s.c.WaitFor(t, stepTimeout, "shimd has no pods", func() error {
		out, err := s.env.Shimd.Crictl(t, "pods", "-q")
		if err != nil {
			return err
		}
		if strings.TrimSpace(out) != "" {
			return fmt.Errorf("pods left: %s", out)
		}
		return nil
	})
}

// forceRemovePods takes every pod down through CRI (after a failure).
func (s *e2e) forceRemovePods(t testing.TB) {
	out, _ := s.env.Shimd.Crictl(t, "pods", "-q")
	for _, id := range strings.Fields(out) {
		_, _ = s.env.Shimd.Crictl(t, "stopp", id)
		_, _ = s.env.Shimd.Crictl(t, "rmp", "-f", id)
	}
}
