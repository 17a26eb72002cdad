//go:build integration

package cluster

import (
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shimd/shimd/critest/harness"
)

const counterScript = `i=0; while true; do i=$((i+1)); echo "n=$i"; sleep 0.1; done`

// Step 7b: the kubelet's checkpoint API (ContainerCheckpoint, on by default):
// POST /checkpoint/{namespace}/{pod}/{container} through the API server's node
// proxy writes an archive under the kubelet's checkpoints directory; an image made
// of it (as checkpointctl and buildah make one) runs as a new pod whose container
// counts on from the checkpoint.
func (s *e2e) stepCheckpointRestore(t *testing.T) {
	if out, err := exec.Command("criu", "check").CombinedOutput(); err != nil {
		t.Skipf("criu check: %v: %s (hack/tools.sh criu builds CRIU 4.1.1)", err, out)
	}
	pod := func(name, image, pull string) string {
		return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: %s}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: counter
    image: %s
    imagePullPolicy: %s
    command: ["sh", "-c", %q]
`, name, ns, image, pull, counterScript)
	}
	s.c.Apply(t, pod("counter", busybox, "IfNotPresent"))
	s.waitPhase(t, "counter", "Running")
	lastCount := func(pod string) int {
		out, _ := s.c.Kubectl(t, "-n", ns, "logs", pod)
		n := -1
		for _, l := range strings.Split(out, "\n") {
			if v, err := strconv.Atoi(strings.TrimPrefix(l, "n=")); err == nil && strings.HasPrefix(l, "n=") {
				n = v
			}
		}
		return n
	}
	s.c.WaitFor(t, stepTimeout, "counter at 20", func() error {
		if n := lastCount("counter"); n < 20 {
			return fmt.Errorf("at %d", n)
		}
		return nil
	})

	start := time.Now()
	url := fmt.Sprintf("%s/api/v1/nodes/%s/proxy/checkpoint/%s/counter/counter", s.c.Server, s.c.NodeName, ns)
	resp, err := s.c.http.Post(url, "application/json", nil)
	if err != nil {
		harness.Fatalf(t, "POST %s: %v", url, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	took := time.Since(start)
	if resp.StatusCode != 200 {
		harness.Fatalf(t, "POST %s: %s: %s", url, resp.Status, body)
	}
	var items struct{ Items []string }
	if err := json.Unmarshal(body, &items); err != nil || len(items.Items) != 1 {
		harness.Fatalf(t, "checkpoint answer %s: %v", body, err)
	}
	archive := items.Items[0]
	want := filepath.Join(s.c.Kubelet.RootDir, "checkpoints") + "/"
	if !strings.HasPrefix(archive, want) {
		harness.Errorf(t, "the kubelet wrote %s, not under %s", archive, want)
	}
	atCheckpoint := lastCount("counter")
	t.Logf("kubelet checkpoint API: %s in %s (counter at %d after it)", archive, took.Round(time.Millisecond), atCheckpoint)
	if phase, _ := s.jsonpath(t, "pod", "counter", "{.status.phase}"); phase != "Running" {
		harness.Errorf(t, "the checkpointed pod is %s", phase)
	}

	ref := harness.ImportCheckpointImage(t, s.env, archive, "localhost/checkpoint/counter:v1")
	s.c.Apply(t, pod("counter-restored", ref, "Never"))
	s.waitPhase(t, "counter-restored", "Running")
	s.c.WaitFor(t, stepTimeout, "the restored counter counts on", func() error {
		out, err := s.c.Kubectl(t, "-n", ns, "logs", "counter-restored")
		if err != nil {
			return err
		}
		first := -1
		for _, l := range strings.Split(out, "\n") {
			if v, err := strconv.Atoi(strings.TrimPrefix(l, "n=")); err == nil && strings.HasPrefix(l, "n=") {
				first = v
				break
			}
		}
		switch {
		case first < 0:
			return fmt.Errorf("no count yet")
		case first <= 20 || first > atCheckpoint+1:
			return fmt.Errorf("the restored counter began at n=%d; the checkpoint was taken at or before n=%d", first, atCheckpoint)
		}
		t.Logf("restored pod: first count n=%d", first)
		return nil
	})
	s.kubectl(t, "-n", ns, "delete", "pod", "counter", "counter-restored", "--wait=true", "--timeout=2m")
}
