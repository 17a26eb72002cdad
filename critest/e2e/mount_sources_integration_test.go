//go:build integration

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
)

// TestAbsentMountSourceMadeAsDirectory: by default a bind mount whose host path is
// missing gets it made as a directory (0755, its missing parents too), as
// containerd's CRI plugin and CRI-O do, and the container writes through it to the
// host; flannel's DaemonSet mounts /run/flannel so, before flanneld makes it. A
// source under a file is still NotFound (TestRuncRefusalsCaughtAtCreate holds the
// refusals with reject_absent_mount_sources).
func TestAbsentMountSourceMadeAsDirectory(t *testing.T) {
	requireRoot(t)
	env, _ := imageEnv(t, harness.Options{})
	pull(t, env, busyboxImage)
	rs := env.Shimd.Runtime(t)
	pod := newPod(t, rs, "absent-source")
	src := filepath.Join(t.TempDir(), "made", "by", "shimd")
	cfg := pod.container("writer", "sh", "-c", "echo through > /m/f && exec sleep 100000")
	cfg.Mounts = []*runtimeapi.Mount{{HostPath: src, ContainerPath: "/m"}}
	id := pod.run(cfg)
	require.Equal(t, runtimeapi.ContainerState_CONTAINER_RUNNING, containerStatus(t, rs, id).State)
	for _, d := range []string{src, filepath.Dir(src)} {
		fi, err := os.Stat(d)
		require.NoError(t, err)
		require.True(t, fi.IsDir(), d)
		require.Equal(t, os.FileMode(0o755), fi.Mode().Perm(), d)
	}
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(filepath.Join(src, "f"))
		return err == nil && strings.TrimSpace(string(b)) == "through"
	}, 30*time.Second, 100*time.Millisecond, "the container's write did not reach the host directory")
	stopRemove(t, rs, pod.id)
}
