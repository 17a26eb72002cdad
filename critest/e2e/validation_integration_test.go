//go:build integration

package e2e

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
)

// containerdIDs lists the containerd containers in shimd's namespace.
func containerdIDs(t *testing.T, env *harness.Env) []string {
	t.Helper()
	ctx := namespaces.WithNamespace(ctxT(t, 30*time.Second), env.Namespace)
	list, err := env.Containerd.Client(t).Containers(ctx)
	require.NoError(t, err)
	ids := make([]string, 0, len(list))
	for _, c := range list {
		ids = append(ids, c.ID())
	}
	return ids
}

// requireRefused checks that err is InvalidArgument naming want, and that shimd
// created no containerd container and no netns for the request.
func requireRefused(t *testing.T, env *harness.Env, before []string, err error, want string) {
	t.Helper()
	require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	require.Contains(t, status.Convert(err).Message(), want)
	require.ElementsMatch(t, before, containerdIDs(t, env), "a refused request created a containerd container")
}

// A Localhost seccomp profile that is a FIFO, a device, a directory or missing is
// refused quickly: opening a FIFO must not block, /dev/zero must not be read.
func TestBadSeccompProfilePaths(t *testing.T) {
	requireRoot(t)
	env, _ := imageEnv(t, harness.Options{})
	pull(t, env, busyboxImage)
	rs := env.Shimd.Runtime(t)
	pod := newPod(t, rs, "seccomp")
	dir := t.TempDir()
	fifo := filepath.Join(dir, "profile.fifo")
	require.NoError(t, unix.Mkfifo(fifo, 0o600))
	before := containerdIDs(t, env)

	for _, path := range []string{fifo, "/dev/zero", dir, filepath.Join(dir, "missing.json")} {
		cfg := pod.container("sc")
		cfg.Linux.SecurityContext.Seccomp = &runtimeapi.SecurityProfile{
			ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: path}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		start := time.Now()
		_, err := rs.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: pod.id, Config: cfg, SandboxConfig: pod.cfg})
		cancel()
		require.Less(t, time.Since(start), 5*time.Second, "%s took too long", path)
		requireRefused(t, env, before, err, "seccomp")
	}
	stopRemove(t, rs, pod.id)
}
