//go:build integration

package kubeadm

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shimd/shimd/critest/harness"
)

// TestKubeadmMoveNodeToShimd moves a worker from containerd's CRI plugin to
// shimd as docs/operating.md says: drain, stop the kubelet, remove the pods
// left in containerd's CRI (the DaemonSets'), point the kubelet (its config
// file) and the node's cri-socket annotation at shimd, start the kubelet,
// uncordon. The node comes back Ready on shimd, the DaemonSets' pods and a
// Deployment's run there on shimd, and a pod there reaches one on node1.
// containerd's k8s.io images stay where they were: shimd pulls its own.
func TestKubeadmMoveNodeToShimd(t *testing.T) {
	c := StartWith(t, Options{Nodes: 2, ContainerdCRI: map[string]bool{"node2": true}})
	t.Cleanup(func() { c.Reset(t) })
	n1, n2 := c.Nodes[0], c.Nodes[1]
	runtimeOf := func() string {
		out, err := c.Kubectl(t, "get", "node", n2.Name, "-o", "jsonpath={.status.nodeInfo.containerRuntimeVersion}")
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	if rt := runtimeOf(); !strings.HasPrefix(rt, "containerd://") {
		t.Fatalf("%s runs on %q, want containerd's CRI", n2.Name, rt)
	}
	c.Apply(t, fmt.Sprintf(lifecycleDeployment, nginx))
	c.WaitFor(t, 3*time.Minute, "Deployment web available", func() error {
		_, err := c.Kubectl(t, "rollout", "status", "deployment/web", "--timeout=5s")
		return err
	})
	// crictl's own config for containerd's CRI: without one, crictl looks for the
	// host's /etc/crictl.yaml and warns on stderr when there is none (a fresh
	// machine), which would read as containers left.
	cfg := filepath.Join(n2.Dir, "crictl-containerd.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("runtime-endpoint: %s\nimage-endpoint: %s\ntimeout: 60\n", n2.CRIEndpoint(), n2.CRIEndpoint())), 0o644); err != nil {
		t.Fatal(err)
	}
	ctrd := []string{"--config", cfg}
	crictl := func(args ...string) string {
		t.Helper()
		out, err := n2.Run(t, harness.Tools().Crictl, append(ctrd, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	if out := crictl("ps", "-q"); strings.TrimSpace(out) == "" {
		t.Fatalf("no container in containerd's CRI on %s", n2.Name)
	}

	// 1. drain; 2. stop the kubelet; 3. remove what containerd's CRI still runs.
	if out, err := c.Kubectl(t, "drain", n2.Name, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=3m"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	n2.Kubelet.Stop()
	crictl("rmp", "-fa")
	images := crictl("images", "-q")
	t.Logf("containerd's CRI on %s keeps %d images in its k8s.io namespace", n2.Name, len(strings.Fields(images)))

	// 4. the kubelet's runtime: containerRuntimeEndpoint in the kubelet's config
	// file (kubeadm v1.37 writes it there, not in kubeadm-flags.env) and the
	// node's annotation, which kubeadm reads for the node's CRI socket.
	flags := n2.Path("/var/lib/kubelet/config.yaml")
	b, err := os.ReadFile(flags)
	if err != nil {
		t.Fatal(err)
	}
	moved := strings.ReplaceAll(string(b), n2.CRIEndpoint(), n2.Shimd.Endpoint())
	if moved == string(b) {
		t.Fatalf("%s does not name %s: %s", flags, n2.CRIEndpoint(), b)
	}
	if err := os.WriteFile(flags, []byte(moved), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := c.Kubectl(t, "annotate", "--overwrite", "node", n2.Name, "kubeadm.alpha.kubernetes.io/cri-socket="+n2.Shimd.Endpoint()); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	n2.ContainerdCRI = false
	// 5. start the kubelet; 6. uncordon.
	n2.startKubelet(t)
	c.WaitFor(t, 3*time.Minute, n2.Name+" Ready on shimd", func() error {
		if rt := runtimeOf(); !strings.HasPrefix(rt, "shimd://") {
			return fmt.Errorf("runtime %q", rt)
		}
		_, err := c.Kubectl(t, "wait", "--for=condition=Ready", "node/"+n2.Name, "--timeout=5s")
		return err
	})
	if out, err := c.Kubectl(t, "uncordon", n2.Name); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if out, err := c.Kubectl(t, "scale", "deployment/web", "--replicas=6"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	c.WaitFor(t, 3*time.Minute, "the DaemonSets' pods and the Deployment's Ready on "+n2.Name+" on shimd", func() error {
		out, err := c.Kubectl(t, "get", "pods", "-A", "--field-selector", "spec.nodeName="+n2.Name, "-o",
			`jsonpath={range .items[*]}{.metadata.name} {.status.containerStatuses[0].containerID} {.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}`)
		if err != nil {
			return err
		}
		web := 0
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			f := strings.Fields(l)
			if len(f) != 3 || !strings.HasPrefix(f[1], "shimd://") || f[2] != "True" {
				return fmt.Errorf("pods on %s: %q", n2.Name, out)
			}
			if strings.HasPrefix(f[0], "web-") {
				web++
			}
		}
		if web == 0 || !strings.Contains(out, "kube-proxy-") || !strings.Contains(out, "kube-flannel-") {
			return fmt.Errorf("pods on %s: %q", n2.Name, out)
		}
		return nil
	})
	if out := crictl("ps", "-q"); strings.TrimSpace(out) != "" {
		t.Errorf("containers still in containerd's CRI on %s: %s", n2.Name, out)
	}
	// Pod to pod from the moved node.
	out, err := c.Kubectl(t, "get", "pods", "-l", "app=web", "-o",
		`jsonpath={range .items[*]}{.metadata.name} {.spec.nodeName} {.status.podIP}{"\n"}{end}`)
	if err != nil {
		t.Fatal(err)
	}
	var from, to string
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) == 3 && f[1] == n2.Name && from == "" {
			from = f[0]
		}
		if len(f) == 3 && f[1] == n1.Name && to == "" {
			to = f[2]
		}
	}
	if from == "" || to == "" {
		t.Fatalf("no web pod on each node: %s", out)
	}
	c.WaitFor(t, time.Minute, from+" GET "+to, func() error {
		_, err := c.Kubectl(t, "exec", from, "--", "wget", "-q", "-T", "5", "-O", "-", "http://"+to+"/")
		return err
	})
}
