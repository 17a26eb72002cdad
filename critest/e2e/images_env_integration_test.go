//go:build integration

package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
)

// Images used by our tests, by their real upstream names; the local registry serves
// them through hosts.toml mirrors (critest/images).
const (
	busyboxImage = "docker.io/library/busybox:latest"
	pauseImage39 = "registry.k8s.io/pause:3.9"
)

// imageEnv is a harness Env whose shimd pulls from the local registry.
func imageEnv(t *testing.T, opts harness.Options) (*harness.Env, *harness.Registry) {
	t.Helper()
	reg := harness.StartRegistry(t, harness.RegistryOptions{})
	hosts := t.TempDir()
	reg.WriteHermeticHostsDir(t, hosts) // a missing image never falls through to the real registry
	opts.Shimd.ExtraConfig += fmt.Sprintf("[registry]\nconfig_path = %q\n", hosts)
	return harness.New(t, opts), reg
}

func pull(t *testing.T, env *harness.Env, ref string) string {
	t.Helper()
	waitReady(t, env.Shimd.Runtime(t)) // harness.New waits for Version only
	resp, err := env.Shimd.Images(t).PullImage(ctxT(t, 5*time.Minute), &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
	require.NoError(t, err)
	require.NotEmpty(t, resp.ImageRef)
	return resp.ImageRef
}
