//go:build integration

package kubeadm

import (
	"fmt"
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

// TestKubeadmNodeLifecycle: on a worker running part of a Deployment (and its
// kube-proxy and flannel pods), a restart of shimd and a kill -9 of containerd
// restart no container and recreate none (the same container ids and restart
// counts, checked after a new pod on that node has become Ready, so the
// kubelet has synced with the runtime since); then kubectl drain moves the
// Deployment's pods to the other node and they become available there.
func TestKubeadmNodeLifecycle(t *testing.T) {
	c := Start(t, 2)
	t.Cleanup(func() { c.Reset(t) })
	n2 := c.Nodes[1]
	c.Apply(t, fmt.Sprintf(lifecycleDeployment, nginx))
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
