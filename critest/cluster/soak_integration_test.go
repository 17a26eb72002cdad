//go:build integration

package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestClusterKill9Soak repeats step 8 of TestCluster with random timing: a rollout of
// a Deployment, shimd killed with SIGKILL somewhere in it and started again, and the
// rollout must finish. After every round, once the kubelet has settled, shimd must
// account for everything containerd and CNI hold: every containerd container is a pod
// or container CRI lists, and every IP lease belongs to a ready pod. At the end the
// namespace is deleted and the harness's leak check runs.
//
// SHIMD_CLUSTER_SOAK=N runs N rounds (make cluster-soak); SHIMD_SOAK_SEED repeats a
// run's timing.
func TestClusterKill9Soak(t *testing.T) {
	rounds, _ := strconv.Atoi(os.Getenv("SHIMD_CLUSTER_SOAK"))
	if rounds <= 0 {
		t.Skip("SHIMD_CLUSTER_SOAK=N runs N rounds (make cluster-soak)")
	}
	seed := time.Now().UnixNano() % 1_000_000_000
	if v := os.Getenv("SHIMD_SOAK_SEED"); v != "" {
		seed, _ = strconv.ParseInt(v, 10, 64)
	}
	rng := rand.New(rand.NewSource(seed))
	t.Logf("seed %d (SHIMD_SOAK_SEED=%d repeats the timing)", seed, seed)
	s := startCluster(t)
	s.c.Apply(t, deployment("web", busybox, 4))
	s.waitAvailable(t, "web", 4)
	images := []string{busybox136, busybox}
	for i := 0; i < rounds && !t.Failed(); i++ {
		image := images[i%2]
		killAfter := time.Duration(200+rng.Intn(2800)) * time.Millisecond
		downFor := time.Duration(rng.Intn(2000)) * time.Millisecond
		start := time.Now()
		s.kubectl(t, "-n", ns, "set", "image", "deployment/web", "main="+image)
		time.Sleep(killAfter)
		s.env.Shimd.Kill9()
		time.Sleep(downFor)
		s.env.Shimd.Start(t)
		s.kubectl(t, "-n", ns, "rollout", "status", "deployment/web", "--timeout", "4m")
		s.waitAvailable(t, "web", 4)
		s.waitRolledOut(t, image, 4)
		s.c.WaitFor(t, 90*time.Second, "shimd accounts for what containerd and CNI hold", func() error {
			return s.unaccounted(t)
		})
		t.Logf("round %d: killed %s into the rollout, down %s; rolled out and settled in %s",
			i+1, killAfter, downFor, time.Since(start).Round(time.Millisecond))
	}
	s.stepTeardown(t)
}

// unaccounted lists what containerd or CNI holds that CRI does not show: containerd
// containers that are no pod or container shimd lists, and IP leases beyond the ready
// pods' addresses.
func (s *e2e) unaccounted(t testing.TB) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ctrs, err := s.env.Containerd.Client(t).ContainerService().List(ctx)
	if err != nil {
		return err
	}
	var pods struct {
		Items []struct {
			ID    string
			State string
		}
	}
	out, err := s.env.Shimd.Crictl(t, "pods", "-o", "json")
	if err == nil {
		err = json.Unmarshal([]byte(out), &pods)
	}
	if err != nil {
		return fmt.Errorf("crictl pods: %v", err)
	}
	ps, err := s.env.Shimd.Crictl(t, "ps", "-a", "-q")
	if err != nil {
		return fmt.Errorf("crictl ps: %v", err)
	}
	known := map[string]bool{}
	for _, id := range strings.Fields(ps) {
		known[id] = true
	}
	var readyIPs []string
	for _, p := range pods.Items {
		known[p.ID] = true
		if p.State == "SANDBOX_READY" {
			st, err := s.env.Shimd.Crictl(t, "inspectp", "-o", "go-template", "--template", "{{.status.network.ip}}", p.ID)
			if err == nil && net.ParseIP(strings.TrimSpace(st)) != nil {
				readyIPs = append(readyIPs, strings.TrimSpace(st))
			}
		}
	}
	var problems []string
	for _, c := range ctrs {
		if !known[c.ID] {
			problems = append(problems, fmt.Sprintf("containerd container %s (labels %v) is no pod or container CRI lists", c.ID, c.Labels))
		}
	}
	leases, _ := filepath.Glob(filepath.Join(s.env.CNI.DataDir, "*", "*"))
	for _, l := range leases {
		if ip := filepath.Base(l); net.ParseIP(ip) != nil && !slices.Contains(readyIPs, ip) && s.env.CNI.Subnet.Contains(net.ParseIP(ip)) {
			problems = append(problems, fmt.Sprintf("IP lease %s is no ready pod's (ready: %v)", ip, readyIPs))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%s", strings.Join(problems, "\n"))
	}
	return nil
}
