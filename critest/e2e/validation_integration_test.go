//go:build integration

package e2e

import (
	"context"
	"net"
	"os"
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

// Pod metadata is passed to CNI in CNI_ARGS: "x;IP=198.19.77.250" would pick the pod's
// address. It is refused before any netns or container exists.
func TestPodMetadataInjectionRefused(t *testing.T) {
	requireRoot(t)
	env := harness.New(t, harness.Options{})
	rs := env.Shimd.Runtime(t)
	const evil = "x;IP=198.19.77.250"
	nulLog := podConfig("nullog")
	nulLog.LogDirectory = "/tmp/a\x00b"
	cases := map[string]*runtimeapi.PodSandboxConfig{"config.log_directory": nulLog}
	for _, field := range []string{"name", "namespace", "uid"} {
		cfg := podConfig("inject")
		switch field {
		case "name":
			cfg.Metadata.Name = evil
		case "namespace":
			cfg.Metadata.Namespace = evil
		case "uid":
			cfg.Metadata.Uid = evil
		}
		cases["config.metadata."+field] = cfg
	}
	for field, cfg := range cases {
		_, err := rs.RunPodSandbox(ctxT(t, time.Minute), &runtimeapi.RunPodSandboxRequest{Config: cfg})
		requireRefused(t, env, nil, err, field)
	}
	require.Empty(t, listPods(t, rs, nil))
	entries, _ := os.ReadDir(env.Shimd.NetnsDir())
	require.Empty(t, entries, "no netns for a refused pod")
}

// Sysctls runc would refuse (bad names, not namespaced, in a namespace shared with the
// node) are InvalidArgument naming the key; '/' separators work as with the kubelet.
func TestPodSysctlsValidated(t *testing.T) {
	requireRoot(t)
	env := harness.New(t, harness.Options{})
	rs := env.Shimd.Runtime(t)
	hostNet := &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE}
	hostIPC := &runtimeapi.NamespaceOption{Ipc: runtimeapi.NamespaceMode_NODE}
	for _, tt := range []struct {
		key string
		ns  *runtimeapi.NamespaceOption
	}{
		{"-10", nil}, {".dev.mem1", nil}, {"vm.overcommit_memory", nil}, {"kernel.panic", nil},
		{"net.ipv4.ip_unprivileged_port_start", hostNet}, {"kernel.shmmax", hostIPC},
	} {
		cfg := podConfig("sysctl")
		cfg.Linux.Sysctls = map[string]string{tt.key: "1"}
		cfg.Linux.SecurityContext.NamespaceOptions = tt.ns
		_, err := rs.RunPodSandbox(ctxT(t, time.Minute), &runtimeapi.RunPodSandboxRequest{Config: cfg})
		requireRefused(t, env, nil, err, tt.key)
	}
	require.Empty(t, listPods(t, rs, nil))

	cfg := podConfig("sysctl-ok")
	cfg.Linux.Sysctls = map[string]string{"net/ipv4/ip_unprivileged_port_start": "1000", "kernel.shm_rmid_forced": "1"}
	id := runPod(t, rs, cfg)
	require.Equal(t, runtimeapi.PodSandboxState_SANDBOX_READY, podStatus(t, rs, id).State)
	stopRemove(t, rs, id)
}

// Container configs runc is sure to refuse at start are refused at CreateContainer;
// resource updates runc would refuse are refused too.
func TestContainerConfigsRuncRefuses(t *testing.T) {
	requireRoot(t)
	env, _ := imageEnv(t, harness.Options{})
	pull(t, env, busyboxImage)
	rs := env.Shimd.Runtime(t)
	pod := newPod(t, rs, "refuse")
	before := containerdIDs(t, env)
	mount := func(dst string) func(*runtimeapi.ContainerConfig) {
		return func(c *runtimeapi.ContainerConfig) {
			c.Mounts = []*runtimeapi.Mount{{HostPath: t.TempDir(), ContainerPath: dst}}
		}
	}
	res := func(r *runtimeapi.LinuxContainerResources) func(*runtimeapi.ContainerConfig) {
		return func(c *runtimeapi.ContainerConfig) { c.Linux.Resources = r }
	}
	for _, tt := range []struct {
		field  string
		mutate func(*runtimeapi.ContainerConfig)
	}{
		{"unified", res(&runtimeapi.LinuxContainerResources{Unified: map[string]string{"memory.high": "100000000"}})},
		{"container_path", mount("/proc/self/root/etc")},
		{"container_path", mount("/")},
		{"container_path", mount("/data/../../etc")},
		{"cpuset_cpus", res(&runtimeapi.LinuxContainerResources{CpusetCpus: "0-4095"})},
		{"cpuset_cpus", res(&runtimeapi.LinuxContainerResources{CpusetCpus: "zero"})},
		{"cpuset_mems", res(&runtimeapi.LinuxContainerResources{CpusetMems: "63"})},
		{"memory_limit_in_bytes", res(&runtimeapi.LinuxContainerResources{MemoryLimitInBytes: -100})},
		{"cpu_shares", res(&runtimeapi.LinuxContainerResources{CpuShares: -3})},
		{"log_path", func(c *runtimeapi.ContainerConfig) { c.LogPath = "a\x00b.log" }},
		{"add_capabilities[0]", func(c *runtimeapi.ContainerConfig) {
			c.Linux.SecurityContext.Capabilities = &runtimeapi.Capability{AddCapabilities: []string{"CAP_NOPE"}}
		}},
		{"drop_capabilities[0]", func(c *runtimeapi.ContainerConfig) {
			c.Linux.SecurityContext.Capabilities = &runtimeapi.Capability{DropCapabilities: []string{"teleport"}}
		}},
	} {
		cfg := pod.container("bad", "sleep", "1000")
		tt.mutate(cfg)
		_, err := rs.CreateContainer(ctxT(t, time.Minute), &runtimeapi.CreateContainerRequest{PodSandboxId: pod.id, Config: cfg, SandboxConfig: pod.cfg})
		requireRefused(t, env, before, err, tt.field)
	}

	// A running container holding ~24 MB of anonymous memory (the shell stays: ash would
	// exec a last command in its place): a 4 MiB limit is refused
	// (runc would fail to set it), as are negative values; a sane update works.
	id := pod.run(pod.container("mem", "sh", "-c", "x=$(head -c 24000000 /dev/zero | tr '\\0' a); touch /tmp/ready; while :; do sleep 1; done"))
	deadline := time.Now().Add(30 * time.Second)
	for {
		if r, err := execSync(t, rs, id, 10, "test", "-e", "/tmp/ready"); err == nil && r.ExitCode == 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "the container did not fill its memory")
		time.Sleep(200 * time.Millisecond)
	}
	for field, r := range map[string]*runtimeapi.LinuxContainerResources{
		"memory_limit_in_bytes": {MemoryLimitInBytes: 4 << 20},
		"cpu_shares":            {CpuShares: -5},
		"cpuset_cpus":           {CpusetCpus: "0-4095"},
		"unified":               {Unified: map[string]string{"memory.high": "1"}},
	} {
		_, err := rs.UpdateContainerResources(ctxT(t, time.Minute), &runtimeapi.UpdateContainerResourcesRequest{ContainerId: id, Linux: r})
		require.Equal(t, codes.InvalidArgument, status.Code(err), "%s: %v", field, err)
		require.Contains(t, status.Convert(err).Message(), field)
	}
	_, err := rs.UpdateContainerResources(ctxT(t, time.Minute), &runtimeapi.UpdateContainerResourcesRequest{ContainerId: id,
		Linux: &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 256 << 20, CpuShares: 512}})
	require.NoError(t, err)
	stopRemove(t, rs, pod.id)
}

// A failed pull says why in its code: an unreachable registry is Unavailable, a
// missing tag NotFound, wrong credentials Unauthenticated; the registry is named.
func TestImagePullErrorCodes(t *testing.T) {
	requireRoot(t)
	reg := harness.StartRegistry(t, harness.RegistryOptions{Htpasswd: map[string]string{"alice": "s3cret"}})
	env, open := imageEnv(t, harness.Options{})
	is := env.Shimd.Images(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := l.Addr().String()
	require.NoError(t, l.Close())

	for _, tt := range []struct {
		ref  string
		auth *runtimeapi.AuthConfig
		code codes.Code
		host string
	}{
		{closed + "/library/busybox:1", nil, codes.Unavailable, closed},
		{open.LocalRef("docker.io/library/busybox:no-such-tag"), nil, codes.NotFound, open.Host()},
		{reg.LocalRef("docker.io/library/busybox:1.36"), &runtimeapi.AuthConfig{Username: "alice", Password: "wrong"}, codes.Unauthenticated, reg.Host()},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		_, err := is.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: tt.ref}, Auth: tt.auth})
		cancel()
		require.Equal(t, tt.code, status.Code(err), "%s: %v", tt.ref, err)
		require.Contains(t, status.Convert(err).Message(), tt.host)
	}
}
