//go:build integration

package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
	"github.com/shimd/shimd/critest/kubelet"
)

type fsStats struct {
	CapacityBytes  uint64 `json:"capacityBytes"`
	AvailableBytes uint64 `json:"availableBytes"`
	UsedBytes      uint64 `json:"usedBytes"`
}

func statfs(t *testing.T, path string) (capacity, free uint64) {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * uint64(st.Bsize), st.Bavail * uint64(st.Bsize)
}

// TestClusterSplitImageFilesystem runs a one-node cluster on shimd in KEP-4191's
// layout: the image layers (containerd's overlayfs snapshotter) on one loop-mounted
// filesystem, the containers' writable layers (container_fs_dir) on another that
// also holds the kubelet's root dir (its nodefs), and checks what the kubelet v1.37
// does with it:
//   - image GC: with the image filesystem past imageGCHighThresholdPercent, the
//     kubelet removes the unused image (its first GC, at its start, may find no stats
//     yet; the next runs 5 minutes later);
//   - /stats/summary: node.runtime.imageFs is the image filesystem, node.fs the
//     container filesystem;
//   - eviction for a pod's ephemeral-storage limit: a container writing past it into
//     its root filesystem is evicted, from the usage shimd measures in the writable
//     layer's directory;
//   - node-level eviction: a container filling the container filesystem past
//     evictionHard nodefs.available is evicted (the kubelet's containerfs signal
//     copies imagefs's here, see docs/operating.md), and its layer's removal frees it.
func TestClusterSplitImageFilesystem(t *testing.T) {
	if os.Getenv("SHIMD_SPLIT_IMAGEFS_CLUSTER") != "1" {
		t.Skip("about 8 minutes: make e2e-split-imagefs (SHIMD_SPLIT_IMAGEFS_CLUSTER=1)")
	}
	if os.Geteuid() != 0 {
		t.Skip("the cluster e2e test needs root")
	}
	if _, err := os.Stat(kubelet.Binary()); err != nil {
		t.Skipf("no kubelet at %s: make e2e-cluster builds it", kubelet.Binary())
	}
	imageMnt, nodeMnt := harness.LoopFS(t, "300M"), harness.LoopFS(t, "200M")
	imageFs, containerFs := filepath.Join(imageMnt, "snapshotter"), filepath.Join(nodeMnt, "containers")
	reg := harness.StartRegistry(t, harness.RegistryOptions{})
	hosts := filepath.Join(harness.NewBaseDir(t), "hosts")
	reg.WriteHermeticHostsDir(t, hosts)
	env := harness.New(t, harness.Options{
		Containerd: harness.ContainerdOptions{ExtraConfig: fmt.Sprintf("[plugins.'io.containerd.snapshotter.v1.overlayfs']\n  root_path = %q\n", imageFs)},
		Shimd: harness.ShimdOptions{ExtraConfig: fmt.Sprintf("container_fs_dir = %q\n[registry]\nconfig_path = %q\n",
			containerFs, hosts)},
		LeakTimeout: time.Minute,
	})
	s := &e2e{env: env}
	is := env.Shimd.Images(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	for _, ref := range []string{nginx, busybox} {
		if _, err := is.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}}); err != nil {
			harness.Fatalf(t, "pull %s: %v", ref, err)
		}
	}
	// The image filesystem past the GC's high threshold (60%).
	capacity, free := statfs(t, imageFs)
	filler := filepath.Join(imageMnt, "filler")
	fill := int64(free) - int64(capacity)*25/100
	if err := exec.Command("fallocate", "-l", fmt.Sprint(fill), filler).Run(); err != nil {
		harness.Fatalf(t, "fallocate: %v", err)
	}
	_, free = statfs(t, imageFs)
	t.Logf("image fs %s: %d of %d B free (%d%% used)", imageFs, free, capacity, 100-free*100/capacity)

	s.c = Start(t, Options{RuntimeEndpoint: env.Shimd.Endpoint(), NodeIP: env.CNI.Gateway.String(),
		KubeletDir: filepath.Join(nodeMnt, "kubelet"), KubeletConfig: map[string]any{
			"imageGCHighThresholdPercent": 60, "imageGCLowThresholdPercent": 50, "imageMinimumGCAge": "0s",
			"evictionHard": map[string]string{
				"memory.available": "1Mi", "nodefs.available": "35%", "imagefs.available": "1%", "nodefs.inodesFree": "1%",
			},
			"evictionPressureTransitionPeriod": "5s",
		}})
	t.Cleanup(func() {
		if t.Failed() {
			s.c.Kubelet.Stop()
			s.forceRemovePods(t)
		}
	})
	s.kubectl(t, "create", "namespace", ns)
	s.splitImageGC(t, is, filler)
	s.splitSummary(t, imageFs, containerFs)

	// A pod past its own ephemeral-storage limit.
	s.c.Apply(t, fillerPod("limited", 48, "resources: {limits: {ephemeral-storage: 20Mi}}"))
	msg := s.waitEvicted(t, "limited")
	if !strings.Contains(msg, "ephemeral local storage usage exceeds") {
		harness.Errorf(t, "eviction message %q: not for the pod's ephemeral-storage limit", msg)
	}
	s.kubectl(t, "-n", ns, "delete", "pod", "limited", "--wait=true", "--timeout=2m")
	s.waitNoLayers(t, containerFs)

	// The container filesystem (the kubelet's nodefs) past nodefs.available.
	s.c.Apply(t, fillerPod("hog", 120, ""))
	msg = s.waitEvicted(t, "hog")
	if !strings.Contains(msg, "low on resource: ephemeral-storage") {
		harness.Errorf(t, "eviction message %q: not for the node's ephemeral storage", msg)
	}
	s.kubectl(t, "delete", "namespace", ns, "--wait=true", "--timeout=3m")
	s.waitNoLayers(t, containerFs)
	_, free = statfs(t, containerFs)
	c, _ := statfs(t, containerFs)
	t.Logf("container fs after removal: %d of %d B free", free, c)
	if free < c*80/100 {
		harness.Errorf(t, "container fs: only %d of %d B free after the pods are gone", free, c)
	}
}

// splitImageGC waits for the kubelet's image GC to remove the unused nginx image
// from the full image filesystem, then frees the filler.
func (s *e2e) splitImageGC(t *testing.T, is runtimeapi.ImageServiceClient, filler string) {
	s.c.WaitFor(t, 7*time.Minute, "the kubelet's image GC removes the unused "+nginx, func() error {
		st, err := is.ImageStatus(context.Background(), &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: nginx}})
		if err != nil {
			return err
		}
		if st.Image != nil {
			return fmt.Errorf("still there")
		}
		return nil
	})
	log, _ := os.ReadFile(s.c.Kubelet.LogPath)
	if line := kubeletLine(string(log), "over the high threshold"); line == "" {
		harness.Errorf(t, "the kubelet's log does not say its image GC found the image fs over the high threshold")
	} else {
		t.Logf("kubelet: %s", line)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
}

// splitSummary checks the node's filesystems in /stats/summary.
func (s *e2e) splitSummary(t *testing.T, imageFs, containerFs string) {
	b, err := s.c.Kubelet.Get("/stats/summary")
	if err != nil {
		harness.Fatalf(t, "%v", err)
	}
	var sum struct {
		Node struct {
			Fs      fsStats `json:"fs"`
			Runtime struct {
				ImageFs     fsStats `json:"imageFs"`
				ContainerFs fsStats `json:"containerFs"`
			} `json:"runtime"`
		} `json:"node"`
	}
	if err := json.Unmarshal(b, &sum); err != nil {
		harness.Fatalf(t, "summary: %v", err)
	}
	img, ctr, node := sum.Node.Runtime.ImageFs, sum.Node.Runtime.ContainerFs, sum.Node.Fs
	imgCap, _ := statfs(t, imageFs)
	ctrCap, _ := statfs(t, containerFs)
	t.Logf("summary: node.fs capacity %d; runtime.imageFs capacity %d used %d; runtime.containerFs capacity %d used %d (image fs %d B, container fs %d B)",
		node.CapacityBytes, img.CapacityBytes, img.UsedBytes, ctr.CapacityBytes, ctr.UsedBytes, imgCap, ctrCap)
	if img.CapacityBytes != imgCap {
		harness.Errorf(t, "summary imageFs capacity %d, want the image filesystem's %d", img.CapacityBytes, imgCap)
	}
	if node.CapacityBytes != ctrCap {
		harness.Errorf(t, "summary node.fs capacity %d, want the container filesystem's %d", node.CapacityBytes, ctrCap)
	}
	if ctr == img {
		t.Logf("kubelet %s reports runtime.containerFs as a copy of imageFs: its CRI stats provider does not read container_filesystems", kubelet.Version())
	}
}

// fillerPod writes mib MiB into its root filesystem, then sleeps.
func fillerPod(name string, mib int, resources string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: %s}
spec:
  terminationGracePeriodSeconds: 1
  restartPolicy: Never
  containers:
  - name: filler
    image: %s
    command: ["sh", "-c", "dd if=/dev/zero of=/big bs=1M count=%d && sync && exec sleep 3600"]
    %s
`, name, ns, busybox, mib, resources)
}

// waitEvicted waits until the pod is evicted and returns the eviction's message.
func (s *e2e) waitEvicted(t *testing.T, pod string) string {
	s.c.WaitFor(t, stepTimeout, "pod "+pod+" evicted", func() error {
		reason, err := s.jsonpath(t, "pod", pod, "{.status.reason}")
		if err != nil {
			return err
		}
		if reason != "Evicted" {
			return fmt.Errorf("status.reason %q", reason)
		}
		return nil
	})
	msg, _ := s.jsonpath(t, "pod", pod, "{.status.message}")
	t.Logf("pod %s evicted: %s", pod, msg)
	return msg
}

// waitNoLayers waits until shimd has no pod and container_fs_dir no writable layer.
func (s *e2e) waitNoLayers(t *testing.T, containerFs string) {
	rs := s.env.Shimd.Runtime(t)
	s.c.WaitFor(t, stepTimeout, "no pod in shimd, no writable layer in container_fs_dir", func() error {
		pods, err := rs.ListPodSandbox(context.Background(), &runtimeapi.ListPodSandboxRequest{})
		if err != nil {
			return err
		}
		entries, err := os.ReadDir(containerFs)
		if err != nil {
			return err
		}
		if len(pods.Items) != 0 || len(entries) != 0 {
			return fmt.Errorf("%d pods, %d layers left", len(pods.Items), len(entries))
		}
		return nil
	})
}

func kubeletLine(log, sub string) string {
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, sub) {
			return l
		}
	}
	return ""
}
