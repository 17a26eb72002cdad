//go:build integration

package kubeadm

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

const nginx = "registry.k8s.io/e2e-test-images/nginx:1.27.0-2"

// smokePods: a web server on each node (app=web, behind the Service "web"; the
// second one with hostPort 8080), a web server in the second node's network
// (hostNetwork) and a client on the second node that logs a line.
const smokePods = `apiVersion: v1
kind: Pod
metadata: {name: web-1, labels: {app: web}}
spec:
  nodeName: %[1]s
  containers: [{name: web, image: %[3]s}]
---
apiVersion: v1
kind: Pod
metadata: {name: web-2, labels: {app: web}}
spec:
  nodeName: %[2]s
  containers: [{name: web, image: %[3]s, ports: [{containerPort: 80, hostPort: 8080}]}]
---
apiVersion: v1
kind: Pod
metadata: {name: hostnet}
spec:
  nodeName: %[2]s
  hostNetwork: true
  containers: [{name: web, image: %[3]s}]
---
apiVersion: v1
kind: Pod
metadata: {name: client}
spec:
  nodeName: %[2]s
  containers: [{name: client, image: %[3]s, command: [sh, -c, 'echo hello from %[2]s; exec sleep 3600']}]
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: 80}]
`

// TestKubeadmSmoke: kubeadm's static control plane on shimd, two nodes, flannel;
// pods on both nodes reach each other by pod IP, a Service by ClusterIP and by
// DNS name, a hostPort and a hostNetwork pod by the node's address; kubectl
// exec, logs and port-forward into a pod on the second node; kubeadm reset on
// every node at the end, then nothing of the cluster is left on the host.
// SHIMD_KUBEADM_NODES=3 joins more nodes.
func TestKubeadmSmoke(t *testing.T) {
	nodes := 2
	if v := os.Getenv("SHIMD_KUBEADM_NODES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 2 {
			t.Fatalf("SHIMD_KUBEADM_NODES=%q: want a number of nodes >= 2", v)
		}
		nodes = n
	}
	start := time.Now()
	c := Start(t, nodes)
	t.Logf("cluster of %d nodes Ready after %s", nodes, time.Since(start).Round(time.Second))
	n1, n2 := c.Nodes[0], c.Nodes[1]
	t.Cleanup(func() { c.Reset(t) })

	// The control plane runs as static pods on the first node's shimd.
	running := runningContainers(t, n1)
	for _, name := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd", "kube-proxy", "kube-flannel"} {
		if !running[name] {
			t.Errorf("no running %s container on %s's shimd (crictl ps: %v)", name, n1.Name, running)
		}
	}

	acrossNodes(t, c, n1.Name, n2.Name, n2.IP.String(), 3*time.Minute)

	// What kubeadm reset must clear (Reset checks it is gone) is there to see
	// now: the check can fail.
	left := strings.Join(n2.shimdLeftovers(t), "\n")
	for _, want := range []string{"pods ", " netns in ", "IP leases ", "iptables :CNI-DN-", "cgroup "} {
		if !strings.Contains(left, want) {
			t.Errorf("before kubeadm reset, %s's shimd state shows no %q:\n%s", n2.Name, want, left)
		}
	}
}

// acrossNodes runs smokePods with web-1 on node name1 and the others on name2
// (address ip2node) and checks, between the two: pod to pod both ways by pod
// IP, the Service by ClusterIP and by DNS name from both, hostPort and
// hostNetwork on name2 from name1, kubectl logs, exec and port-forward into
// name2's pods. podTimeout bounds each pod's start.
func acrossNodes(t *testing.T, c *Cluster, name1, name2, ip2node string, podTimeout time.Duration) {
	t.Helper()
	c.Apply(t, fmt.Sprintf(smokePods, name1, name2, nginx))
	for _, p := range []string{"web-1", "web-2", "hostnet", "client"} {
		c.WaitFor(t, podTimeout, "pod "+p+" Ready", func() error {
			_, err := c.Kubectl(t, "wait", "--for=condition=Ready", "pod/"+p, "--timeout=5s")
			return err
		})
	}
	ip := func(pod string) string {
		out, err := c.Kubectl(t, "get", "pod", pod, "-o", "jsonpath={.status.podIP}")
		if err != nil || !strings.HasPrefix(out, "198.18.") {
			t.Fatalf("pod %s's IP %q (want one in %s): %v", pod, out, PodSubnet, err)
		}
		return out
	}
	ip1, ip2 := ip("web-1"), ip("web-2")
	get := func(from, url string) {
		t.Helper()
		var last string
		c.WaitFor(t, time.Minute, from+" GET "+url, func() error {
			out, err := c.Kubectl(t, "exec", from, "--", "wget", "-q", "-T", "5", "-O", "-", url)
			last = out
			if err == nil && !strings.Contains(out, "nginx") {
				err = fmt.Errorf("no nginx page: %q", out)
			}
			return err
		})
		t.Logf("%s -> %s: %d bytes", from, url, len(last))
	}
	// Pod to pod across nodes, both ways (flannel's VXLAN).
	get("client", "http://"+ip1+"/")
	get("web-1", "http://"+ip2+"/")
	// A Service by ClusterIP and by name (kube-proxy, CoreDNS).
	svcIP, err := c.Kubectl(t, "get", "service", "web", "-o", "jsonpath={.spec.clusterIP}")
	if err != nil || !strings.HasPrefix(svcIP, "198.19.") {
		t.Fatalf("Service web's ClusterIP %q: %v", svcIP, err)
	}
	get("client", "http://"+svcIP+"/")
	get("web-1", "http://web.default.svc.cluster.local/")
	get("client", "http://web.default.svc.cluster.local/")
	// hostPort and hostNetwork on the second node, from a pod on the first.
	get("web-1", "http://"+ip2node+":8080/")
	get("web-1", "http://"+ip2node+":80/")

	// logs and exec into the pod on the second node.
	if out, err := c.Kubectl(t, "logs", "client"); err != nil || !strings.Contains(out, "hello from "+name2) {
		t.Errorf("kubectl logs client: %q, %v", out, err)
	}
	if out, err := c.Kubectl(t, "exec", "client", "--", "hostname"); err != nil || out != "client" {
		t.Errorf("kubectl exec client -- hostname: %q, %v", out, err)
	}
	portForward(t, c, "web-2")
}

// portForward runs kubectl port-forward to pod's port 80 and GETs a page through it.
func portForward(t *testing.T, c *Cluster, pod string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := c.KubectlCmd(ctx, "port-forward", "pod/"+pod, "--address", "127.0.0.1", ":80")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cancel()
	re := regexp.MustCompile(`Forwarding from 127\.0\.0\.1:(\d+) -> 80`)
	ports := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				ports <- m[1]
				break
			}
		}
		io.Copy(io.Discard, stdout)
	}()
	var port string
	select {
	case port = <-ports:
	case <-time.After(time.Minute):
		t.Fatalf("kubectl port-forward pod/%s printed no port", pod)
	}
	resp, err := http.Get("http://127.0.0.1:" + port + "/")
	if err != nil {
		t.Fatalf("GET through port-forward: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "nginx") {
		t.Fatalf("GET through port-forward to %s: %s %q", pod, resp.Status, b)
	}
	t.Logf("port-forward to %s: %s, %d bytes", pod, resp.Status, len(b))
}

// runningContainers are the names of the containers running on n's shimd (crictl ps).
func runningContainers(t *testing.T, n *Node) map[string]bool {
	t.Helper()
	out, err := n.Shimd.Crictl(t, "ps", "-o", "json")
	if err != nil {
		t.Fatalf("crictl ps: %v", err)
	}
	var list struct {
		Containers []struct {
			Metadata struct{ Name string }
			State    string
		}
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("crictl ps -o json: %v: %s", err, out)
	}
	names := map[string]bool{}
	for _, c := range list.Containers {
		if c.State == "CONTAINER_RUNNING" {
			names[c.Metadata.Name] = true
		}
	}
	return names
}
