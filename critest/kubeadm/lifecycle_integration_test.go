//go:build integration

package kubeadm

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// lifecycleDeployment spreads 4 web servers over the nodes, softly
// (ScheduleAnyway): after a drain they must fit on the one node left.
const lifecycleDeployment = `apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 4
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      topologySpreadConstraints:
      - {maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: ScheduleAnyway, labelSelector: {matchLabels: {app: web}}}
      containers: [{name: web, image: %s}]
`

// restartPolicyPods are two bare pods on a node: one never restarted, one
// restarted on failure.
const restartPolicyPods = `apiVersion: v1
kind: Pod
metadata: {name: never}
spec:
  nodeName: %[1]s
  restartPolicy: Never
  containers: [{name: c, image: %[2]s}]
---
apiVersion: v1
kind: Pod
metadata: {name: onfailure}
spec:
  nodeName: %[1]s
  restartPolicy: OnFailure
  containers: [{name: c, image: %[2]s}]
`

// TestKubeadmNodeLifecycle: on a worker running part of a Deployment (and its
// kube-proxy and flannel pods, and two bare pods with restartPolicy Never and
// OnFailure), a restart of shimd and a kill -9 of containerd restart no
// container and recreate none (the same container ids and restart counts,
// checked after a new pod on that node has become Ready, so the kubelet has
// synced with the runtime since). Then the worker is rebooted (Reboot: power
// cut, namespaces, mounts, cgroups and tmpfs state gone): every pod comes back
// as its restartPolicy says (Always and OnFailure: a new container, one
// restart more, Ready; Never: Failed, its container not recreated), and the
// node's IP leases are those of its running pods again. Last, kubectl drain
// moves the Deployment's pods to the other node and they become available
// there.
func TestKubeadmNodeLifecycle(t *testing.T) {
	c := Start(t, 2)
	t.Cleanup(func() { c.Reset(t) })
	n2 := c.Nodes[1]
	c.Apply(t, fmt.Sprintf(lifecycleDeployment, nginx))
	c.Apply(t, fmt.Sprintf(restartPolicyPods, n2.Name, nginx))
	c.WaitFor(t, 3*time.Minute, "pods never and onfailure Ready", func() error {
		_, err := c.Kubectl(t, "wait", "--for=condition=Ready", "pod/never", "pod/onfailure", "--timeout=5s")
		return err
	})
	c.WaitFor(t, 3*time.Minute, "Deployment web available", func() error {
		_, err := c.Kubectl(t, "rollout", "status", "deployment/web", "--timeout=5s")
		return err
	})
	before := c.containersOn(t, n2.Name)
	if !strings.Contains(fmt.Sprint(before), "web-") {
		t.Fatalf("no pod of the Deployment on %s: %v", n2.Name, before)
	}
	t.Logf("containers on %s: %v", n2.Name, before)

	steps := []struct {
		name string
		do   func()
	}{
		{"shimd restarted", func() { n2.Shimd.Stop(); n2.Shimd.Start(t) }},
		{"containerd killed with SIGKILL and started again", func() { n2.Containerd.Kill(); n2.Containerd.Restart(t) }},
	}
	for i, s := range steps {
		s.do()
		c.readyProbe(t, n2.Name, fmt.Sprintf("probe-%d", i))
		after := c.containersOn(t, n2.Name)
		for pod, was := range before {
			if after[pod] != was {
				t.Errorf("%s on %s: pod %s was %q, now %q", s.name, n2.Name, pod, was, after[pod])
			}
		}
		t.Logf("%s on %s: %d containers unchanged", s.name, n2.Name, len(before))
	}

	c.rebootNode(t, n2)

	if out, err := c.Kubectl(t, "delete", "pod", "never", "onfailure", "--timeout=2m"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if out, err := c.Kubectl(t, "drain", n2.Name, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=3m"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	c.WaitFor(t, 3*time.Minute, "the Deployment's pods all Ready on the other node", func() error {
		out, err := c.Kubectl(t, "get", "pods", "-l", "app=web", "-o",
			`jsonpath={range .items[*]}{.spec.nodeName} {.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}`)
		if err != nil {
			return err
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 4 {
			return fmt.Errorf("%d pods: %q", len(lines), out)
		}
		for _, l := range lines {
			if l != c.Nodes[0].Name+" True" {
				return fmt.Errorf("pods: %q", out)
			}
		}
		return nil
	})
	if out, err := c.Kubectl(t, "uncordon", n2.Name); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

// containersOn maps each pod on node ("namespace/name") to its first
// container's id and restart count.
func (c *Cluster) containersOn(t *testing.T, node string) map[string]string {
	t.Helper()
	out, err := c.Kubectl(t, "get", "pods", "-A", "--field-selector", "spec.nodeName="+node, "-o",
		`jsonpath={range .items[*]}{.metadata.namespace}/{.metadata.name} {.status.containerStatuses[0].containerID} {.status.containerStatuses[0].restartCount}{"\n"}{end}`)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(l); len(f) == 3 && !strings.HasPrefix(f[0], "default/probe-") {
			m[f[0]] = f[1] + " restarts=" + f[2]
		}
	}
	return m
}

// readyProbe runs a pod on node, waits until it is Ready, deletes it and waits
// until it is gone.
func (c *Cluster) readyProbe(t *testing.T, node, name string) {
	t.Helper()
	c.Apply(t, fmt.Sprintf("apiVersion: v1\nkind: Pod\nmetadata: {name: %s}\nspec:\n  nodeName: %s\n  containers: [{name: c, image: %s}]\n", name, node, nginx))
	c.WaitFor(t, 3*time.Minute, "pod "+name+" Ready", func() error {
		_, err := c.Kubectl(t, "wait", "--for=condition=Ready", "pod/"+name, "--timeout=5s")
		return err
	})
	if out, err := c.Kubectl(t, "delete", "pod", name, "--timeout=2m"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

// podState is what rebootNode compares of a pod before and after.
type podState struct {
	policy, phase, id, ready, ip string
	restarts                     int
	hostNetwork                  bool
}

// podsOn lists the pods on node by "namespace/name", but readyProbe's.
func (c *Cluster) podsOn(t *testing.T, node string) map[string]podState {
	t.Helper()
	out, err := c.Kubectl(t, "get", "pods", "-A", "--field-selector", "spec.nodeName="+node, "-o",
		`jsonpath={range .items[*]}{.metadata.namespace}/{.metadata.name} {.spec.restartPolicy} {.status.phase} {.status.containerStatuses[0].containerID} {.status.containerStatuses[0].restartCount} {.status.containerStatuses[0].ready} {.spec.hostNetwork} {.status.podIP}{"\n"}{end}`)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]podState{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(l)
		if len(f) < 6 || strings.HasPrefix(f[0], "default/probe-") {
			continue
		}
		p := podState{policy: f[1], phase: f[2], id: f[3], ready: f[5]}
		p.restarts, _ = strconv.Atoi(f[4])
		rest := f[6:]
		if len(rest) > 0 && (rest[0] == "true" || rest[0] == "false") {
			p.hostNetwork, rest = rest[0] == "true", rest[1:]
		}
		if len(rest) > 0 {
			p.ip = rest[0]
		}
		m[f[0]] = p
	}
	return m
}

// rebootNode reboots node n (Cluster.Reboot) and checks that its pods come back
// as their restartPolicy says and that the node's host-local leases are again
// exactly its running pods' addresses (the old sandboxes' released, though
// their network namespaces died with the power).
func (c *Cluster) rebootNode(t *testing.T, n *Node) {
	t.Helper()
	before := c.podsOn(t, n.Name)
	start := time.Now()
	c.Reboot(t, n)
	var after map[string]podState
	c.WaitFor(t, 5*time.Minute, "the pods on "+n.Name+" back as their restartPolicy says", func() error {
		after = c.podsOn(t, n.Name)
		for name, was := range before {
			now, ok := after[name]
			switch {
			case !ok:
				return fmt.Errorf("%s gone", name)
			case was.policy == "Never":
				if now.phase != "Failed" {
					return fmt.Errorf("%s (Never): phase %s, want Failed", name, now.phase)
				}
			case now.id == was.id || now.ready != "true" || now.phase != "Running":
				return fmt.Errorf("%s (%s): %+v, was %+v", name, was.policy, now, was)
			}
		}
		return nil
	})
	t.Logf("reboot of %s: %d pods back as their restartPolicy says %s after the power cut", n.Name, len(before), time.Since(start).Round(time.Second))
	for name, was := range before {
		now := after[name]
		switch {
		case was.policy == "Never" && (now.id != was.id || now.restarts != was.restarts):
			t.Errorf("%s (Never) was restarted: %+v, was %+v", name, now, was)
		case was.policy != "Never" && now.restarts != was.restarts+1:
			t.Errorf("%s (%s): %d restarts, want %d", name, was.policy, now.restarts, was.restarts+1)
		}
	}
	c.WaitFor(t, 2*time.Minute, "the IP leases on "+n.Name+" those of its running pods", func() error {
		want := map[string]bool{}
		for _, p := range c.podsOn(t, n.Name) {
			if !p.hostNetwork && p.phase == "Running" && p.ip != "" {
				want[p.ip] = true
			}
		}
		paths, _ := filepath.Glob(n.Path("/var/lib/cni/networks/cbr0/198.*"))
		have := map[string]bool{}
		for _, p := range paths {
			have[filepath.Base(p)] = true
		}
		if fmt.Sprint(have) != fmt.Sprint(want) {
			return fmt.Errorf("leases %v, running pods' addresses %v", slices.Sorted(maps.Keys(have)), slices.Sorted(maps.Keys(want)))
		}
		return nil
	})
}
