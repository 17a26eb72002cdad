//go:build integration

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
)

// TestRuncRefusalsCaughtAtCreate sends the requests that an outside bad-input run saw
// answered Unknown (runc refusing them at StartContainer or in a resource update) and
// their near kin. Each is refused at CreateContainer or UpdateContainerResources with
// InvalidArgument or NotFound naming the field, and leaves nothing: no containerd
// container, no snapshot, no lease, no name held, no container listed; a refused
// update changes no limit.
func TestRuncRefusalsCaughtAtCreate(t *testing.T) {
	requireRoot(t)
	// A missing host path is refused only with reject_absent_mount_sources (by
	// default shimd makes it: TestAbsentMountSourceMadeAsDirectory).
	env, _ := imageEnv(t, harness.Options{Shimd: harness.ShimdOptions{ExtraConfig: "reject_absent_mount_sources = true\n"}})
	pull(t, env, busyboxImage)
	rs := env.Shimd.Runtime(t)
	pod := newPod(t, rs, "refusals")
	cl := env.Containerd.Client(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))

	res := func(r *runtimeapi.LinuxContainerResources) func(*runtimeapi.ContainerConfig) {
		return func(c *runtimeapi.ContainerConfig) { c.Linux.Resources = r }
	}
	sc := func(f func(*runtimeapi.LinuxContainerSecurityContext)) func(*runtimeapi.ContainerConfig) {
		return func(c *runtimeapi.ContainerConfig) { f(c.Linux.SecurityContext) }
	}
	// Created after the first refusals, so that those by the image's first container
	// (reading its /etc/passwd) and by later ones (a cached user database) are both seen.
	warm := func(c *runtimeapi.ContainerConfig) { c.WorkingDir = "/bin/sh" }
	for _, tt := range []struct {
		name   string
		mutate func(*runtimeapi.ContainerConfig)
		code   codes.Code
		field  string
	}{
		// The seven.
		{"memory limit of 1 byte", res(&runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 1}), codes.InvalidArgument, "config.linux.resources.memory_limit_in_bytes"},
		{"swap below memory", res(&runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 64 << 20, MemorySwapLimitInBytes: 32 << 20}),
			codes.InvalidArgument, "config.linux.resources.memory_swap_limit_in_bytes"},
		{"NUL in a masked path", sc(func(s *runtimeapi.LinuxContainerSecurityContext) {
			s.MaskedPaths = []string{"/proc/kcore", "/proc/a\x00b"}
		}),
			codes.InvalidArgument, "config.linux.security_context.masked_paths[1]"},
		{"NUL in a read-only path", sc(func(s *runtimeapi.LinuxContainerSecurityContext) { s.ReadonlyPaths = []string{"/proc/a\x00b"} }),
			codes.InvalidArgument, "config.linux.security_context.readonly_paths[0]"},
		{"working dir a file of the image", func(c *runtimeapi.ContainerConfig) { c.WorkingDir = "/etc/passwd" }, codes.InvalidArgument, "config.working_dir"},
		{"host path missing", func(c *runtimeapi.ContainerConfig) {
			c.Mounts = []*runtimeapi.Mount{{HostPath: filepath.Join(dir, "missing"), ContainerPath: "/m"}}
		}, codes.NotFound, "config.mounts[0].host_path"},
		{"device missing", func(c *runtimeapi.ContainerConfig) {
			c.Devices = []*runtimeapi.Device{{HostPath: "/dev/shimd-missing", ContainerPath: "/dev/x", Permissions: "rwm"}}
		}, codes.NotFound, "config.devices[0].host_path"},
		// Their kin.
		{"working dir a file, user database cached", warm, codes.InvalidArgument, "config.working_dir"},
		{"working dir under a file", func(c *runtimeapi.ContainerConfig) { c.WorkingDir = "/etc/passwd/sub" }, codes.InvalidArgument, "config.working_dir"},
		{"working dir a device node", func(c *runtimeapi.ContainerConfig) { c.WorkingDir = "/dev/zero" }, codes.InvalidArgument, "config.working_dir"},
		{"working dir a pod file", func(c *runtimeapi.ContainerConfig) { c.WorkingDir = "/etc/hosts" }, codes.InvalidArgument, "config.working_dir"},
		{"masked path under a file", sc(func(s *runtimeapi.LinuxContainerSecurityContext) { s.MaskedPaths = []string{"/etc/passwd/x"} }),
			codes.InvalidArgument, "config.linux.security_context.masked_paths[0]"},
		{"swap without memory", res(&runtimeapi.LinuxContainerResources{MemorySwapLimitInBytes: 64 << 20}),
			codes.InvalidArgument, "config.linux.resources.memory_swap_limit_in_bytes"},
		{"memory limit below 6 MiB", res(&runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 3 << 20}), codes.InvalidArgument, "config.linux.resources.memory_limit_in_bytes"},
		{"host path under a file", func(c *runtimeapi.ContainerConfig) {
			c.Mounts = []*runtimeapi.Mount{{HostPath: file + "/x", ContainerPath: "/m"}}
		}, codes.NotFound, "config.mounts[0].host_path"},
		{"device under a file", func(c *runtimeapi.ContainerConfig) {
			c.Devices = []*runtimeapi.Device{{HostPath: "/dev/null/x", ContainerPath: "/dev/x", Permissions: "rwm"}}
		}, codes.NotFound, "config.devices[0].host_path"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := createdState(t, env, rs)
			cfg := pod.container("refused", "sleep", "1000")
			tt.mutate(cfg)
			_, err := rs.CreateContainer(ctxT(t, time.Minute), &runtimeapi.CreateContainerRequest{PodSandboxId: pod.id, Config: cfg, SandboxConfig: pod.cfg})
			require.Equal(t, tt.code, status.Code(err), "%v", err)
			require.Contains(t, status.Convert(err).Message(), tt.field)
			require.Equal(t, before, createdState(t, env, rs), "a refused request left something")
		})
	}

	// The name of the refused containers is free, and what is valid still runs: a
	// working dir that is missing in the image (runc makes it), at the minimum memory.
	ok := pod.container("refused", "sleep", "1000")
	ok.WorkingDir = "/made/by/runc"
	ok.Linux.Resources = &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 6 << 20}
	id := pod.run(ok)
	require.Equal(t, runtimeapi.ContainerState_CONTAINER_RUNNING, containerStatus(t, rs, id).State)

	// Updates: against a running container with a 256 MiB limit and a created one.
	running := pod.container("limited", "sleep", "100000")
	running.Linux.Resources = &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 256 << 20}
	runID := pod.run(running)
	created := pod.container("limited-created", "sleep", "100000")
	created.Linux.Resources = running.Linux.Resources
	createdID := pod.create(created)
	memory := func(id string) (limit, swap int64) {
		c, err := cl.LoadContainer(ctxT(t, time.Minute), id)
		require.NoError(t, err)
		s, err := c.Spec(ctxT(t, time.Minute))
		require.NoError(t, err)
		m := s.Linux.Resources.Memory
		if m.Limit != nil {
			limit = *m.Limit
		}
		if m.Swap != nil {
			swap = *m.Swap
		}
		return limit, swap
	}
	for _, cid := range []string{runID, createdID} {
		for _, tt := range []struct {
			name  string
			r     *runtimeapi.LinuxContainerResources
			field string
		}{
			{"memory limit of 1 byte", &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 1}, "linux.memory_limit_in_bytes"},
			{"swap alone below the memory limit", &runtimeapi.LinuxContainerResources{MemorySwapLimitInBytes: 64 << 20}, "linux.memory_swap_limit_in_bytes"},
			{"swap below a new memory limit", &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 512 << 20, MemorySwapLimitInBytes: 128 << 20},
				"linux.memory_swap_limit_in_bytes"},
		} {
			_, err := rs.UpdateContainerResources(ctxT(t, time.Minute), &runtimeapi.UpdateContainerResourcesRequest{ContainerId: cid, Linux: tt.r})
			require.Equal(t, codes.InvalidArgument, status.Code(err), "%s: %v", tt.name, err)
			require.Contains(t, status.Convert(err).Message(), tt.field, tt.name)
			limit, swap := memory(cid)
			require.Equal(t, [2]int64{256 << 20, 0}, [2]int64{limit, swap}, "%s changed the limits", tt.name)
		}
		// A swap limit at least the memory limit is applied.
		_, err := rs.UpdateContainerResources(ctxT(t, time.Minute), &runtimeapi.UpdateContainerResourcesRequest{ContainerId: cid,
			Linux: &runtimeapi.LinuxContainerResources{MemorySwapLimitInBytes: 512 << 20}})
		require.NoError(t, err)
		limit, swap := memory(cid)
		require.Equal(t, [2]int64{256 << 20, 512 << 20}, [2]int64{limit, swap})
	}
	pod.start(createdID) // its recorded limits are ones runc accepts
	require.Equal(t, runtimeapi.ContainerState_CONTAINER_RUNNING, containerStatus(t, rs, createdID).State)
	stopRemove(t, rs, pod.id)
}

// createdState is what a CreateContainer leaves behind: shimd's containers, containerd's
// containers, snapshots and leases in shimd's namespace.
func createdState(t *testing.T, env *harness.Env, rs runtimeapi.RuntimeServiceClient) map[string]int {
	t.Helper()
	cl := env.Containerd.Client(t)
	list, err := rs.ListContainers(ctxT(t, 30*time.Second), &runtimeapi.ListContainersRequest{})
	require.NoError(t, err)
	leases, err := cl.LeasesService().List(ctxT(t, 30*time.Second))
	require.NoError(t, err)
	return map[string]int{
		"cri containers": len(list.Containers), "containerd containers": len(containerdIDs(t, env)),
		"snapshots": len(snapshotNames(t, cl)), "leases": len(leases),
	}
}

// TestImageConfigRefusedAtCreate: images whose own config holds what runc refuses
// only at start: a working directory that is a file in the layers (the one kind of
// runc refusal an outside run of 10,030 hostile requests still saw answered Unknown at
// StartContainer, "mkdir /wd: file exists"), env entries that are not NAME=VALUE, a
// NUL in the cmd. A container that takes the field from the image is refused at
// create with FailedPrecondition naming the image's field, leaving nothing behind; one
// whose config replaces the field is created.
func TestImageConfigRefusedAtCreate(t *testing.T) {
	requireRoot(t)
	const host = "badimage.test"
	reg := newBlobRegistry(t)
	layer := []layerFile{{file: "wd", data: "a file, not a directory\n"}}
	for _, tt := range []struct {
		tag string
		cfg ocispec.ImageConfig
	}{
		{"wd", ocispec.ImageConfig{Cmd: []string{"/wd"}, WorkingDir: "/wd"}},
		{"env", ocispec.ImageConfig{Cmd: []string{"/wd"}, Env: []string{"PATH=/bin", "NOVALUE"}}},
		{"envname", ocispec.ImageConfig{Cmd: []string{"/wd"}, Env: []string{"=x"}}},
		{"cmd", ocispec.ImageConfig{Cmd: []string{"/wd", "a\x00b"}}},
	} {
		reg.configuredImage(t, tt.tag, layer, tt.cfg)
	}
	env := harness.New(t, harness.Options{Shimd: harness.ShimdOptions{
		ExtraConfig: fmt.Sprintf("[registry]\nconfig_path = %q\n", reg.hostsDir(t, host)),
	}})
	rs, is := env.Shimd.Runtime(t), env.Shimd.Images(t)
	pod := newPod(t, rs, "bad-images")
	for _, tt := range []struct {
		tag, want string
		fix       func(*runtimeapi.ContainerConfig) // a config that replaces the field
	}{
		{"wd", `image.working_dir: "/wd" is a file in the image, not a directory`, func(c *runtimeapi.ContainerConfig) { c.WorkingDir = "/" }},
		{"env", `image.env[1]: "NOVALUE" is not NAME=VALUE`, func(c *runtimeapi.ContainerConfig) {
			c.Envs = []*runtimeapi.KeyValue{{Key: "NOVALUE", Value: []byte("set")}}
		}},
		{"envname", `image.env[0]: "=x" has no name`, nil},
		{"cmd", `image.cmd[1]: "a\x00b" holds a NUL byte`, func(c *runtimeapi.ContainerConfig) { c.Args = []string{"ok"} }},
	} {
		t.Run(tt.tag, func(t *testing.T) {
			ref := host + "/repo/bad:" + tt.tag
			_, err := is.PullImage(ctxT(t, time.Minute), &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
			require.NoError(t, err)
			cfg := func() *runtimeapi.ContainerConfig {
				c := pod.container(tt.tag)
				c.Image.Image = ref
				return c
			}
			// Twice: the second create finds the image's user database cached and so
			// needs the writable layer for nothing but the checks.
			for i := range 2 {
				before := createdState(t, env, rs)
				_, err = rs.CreateContainer(ctxT(t, time.Minute), &runtimeapi.CreateContainerRequest{PodSandboxId: pod.id, Config: cfg(), SandboxConfig: pod.cfg})
				require.Equal(t, codes.FailedPrecondition, status.Code(err), "attempt %d: %v", i, err)
				require.Contains(t, status.Convert(err).Message(), tt.want)
				require.Equal(t, before, createdState(t, env, rs), "a refused request left something")
				if i > 0 || tt.fix == nil {
					continue
				}
				ok := cfg()
				ok.Metadata.Name = tt.tag + "-fixed"
				tt.fix(ok)
				id := pod.create(ok)
				_, err := rs.RemoveContainer(ctxT(t, time.Minute), &runtimeapi.RemoveContainerRequest{ContainerId: id})
				require.NoError(t, err)
			}
		})
	}
	stopRemove(t, rs, pod.id)
}
