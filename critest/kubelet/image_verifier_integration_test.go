//go:build integration

package kubelet

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestKubeletImageVerifierRefusal runs two static pods on a shimd whose image
// verifier (registry.image_verifier_dir) refuses the nginx image: the busybox pod
// runs, and the kubelet reports the nginx pod's container as waiting on the pull
// (ErrImagePull, then ImagePullBackOff) with the verifier's reason, and shimd has no
// such image.
func TestKubeletImageVerifierRefusal(t *testing.T) {
	dir := t.TempDir()
	policy := `#!/bin/sh
case "$2" in *nginx*) echo "not signed by the node's key"; exit 1;; esac
echo signed`
	if err := os.WriteFile(filepath.Join(dir, "10-policy"), []byte(policy+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	s := startE2EShimd(t, nil, fmt.Sprintf("[registry]\nimage_verifier_dir = %q\n", dir), nil)
	if s == nil {
		return
	}
	s.k.WritePod(t, newPod("allowed", shell("c", BusyboxImage, "exec sleep 3600")))
	refused := newPod("refused", corev1.Container{Name: "web", Image: NginxImage})
	s.k.WritePod(t, refused)

	Eventually(t, 2*time.Minute, "the busybox pod runs", func() error {
		pod, err := s.k.Pod("allowed")
		if err != nil {
			return err
		}
		return running(pod, false, "c")
	})
	var reason, message string
	Eventually(t, 2*time.Minute, "the kubelet reports the refused pull", func() error {
		pod, err := s.k.Pod("refused")
		if err != nil {
			return err
		}
		st := containerStatus(pod, "web")
		if st == nil || st.State.Waiting == nil {
			return fmt.Errorf("web: %+v", st)
		}
		reason, message = st.State.Waiting.Reason, st.State.Waiting.Message
		if (reason != "ErrImagePull" && reason != "ImagePullBackOff") || !strings.Contains(message, "not signed by the node's key") {
			return fmt.Errorf("web waits: %s: %s", reason, message)
		}
		return nil
	})
	t.Logf("the kubelet: web waits: %s: %s", reason, message)
	is := s.env.Shimd.Images(t)
	st, err := is.ImageStatus(ctxT(t, 30*time.Second), &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: NginxImage}})
	if err != nil {
		t.Fatal(err)
	}
	if st.GetImage() != nil {
		t.Fatalf("shimd has the refused image: %v", st.GetImage())
	}
	s.pods = []string{"allowed", "refused"}
	s.stepTeardown(t)
}
