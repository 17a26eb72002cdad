package runtime

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/container"
	"github.com/shimd/shimd/pod"
)

var (
	testNode = container.NodeInfo{CPUs: "0-1", MemoryNodes: "0"}
	v2Node   = container.NodeInfo{UnifiedCgroups: true, CPUs: "0-1", MemoryNodes: "0"}
)

func validContainer() *runtimeapi.ContainerConfig {
	return &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "main"},
		Image:    &runtimeapi.ImageSpec{Image: "busybox"},
		Linux:    &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{}},
	}
}

func TestValidateContainerConfig(t *testing.T) {
	mount := func(dst string) func(c *runtimeapi.ContainerConfig) {
		return func(c *runtimeapi.ContainerConfig) {
			c.Mounts = []*runtimeapi.Mount{{HostPath: "/srv", ContainerPath: dst}}
		}
	}
	res := func(r *runtimeapi.LinuxContainerResources) func(c *runtimeapi.ContainerConfig) {
		return func(c *runtimeapi.ContainerConfig) { c.Linux.Resources = r }
	}
	caps := func(add, drop []string) func(c *runtimeapi.ContainerConfig) {
		return func(c *runtimeapi.ContainerConfig) {
			c.Linux.SecurityContext.Capabilities = &runtimeapi.Capability{AddCapabilities: add, DropCapabilities: drop}
		}
	}
	tests := []struct {
		name   string
		mutate func(c *runtimeapi.ContainerConfig)
		node   *container.NodeInfo
		field  string // "" means valid
	}{
		{name: "valid", mutate: func(*runtimeapi.ContainerConfig) {}},
		{name: "critest name", mutate: func(c *runtimeapi.ContainerConfig) {
			c.Metadata.Name = "container-with-HostToContainer-propagation-test-0b6c4e62-2b8b-4c5a-9d5e-3f1a2b3c4d5e"
		}},
		{name: "name with semicolon", mutate: func(c *runtimeapi.ContainerConfig) { c.Metadata.Name = "a;b" }, field: "config.metadata.name"},
		{name: "no metadata", mutate: func(c *runtimeapi.ContainerConfig) { c.Metadata = nil }, field: "config.metadata.name"},
		{name: "nul in log path", mutate: func(c *runtimeapi.ContainerConfig) { c.LogPath = "a\x00.log" }, field: "config.log_path"},
		{name: "nul in command", mutate: func(c *runtimeapi.ContainerConfig) { c.Command = []string{"sh\x00"} }, field: "config.command[0]"},
		{name: "env key with =", mutate: func(c *runtimeapi.ContainerConfig) {
			c.Envs = []*runtimeapi.KeyValue{{Key: "A=B", Value: []byte("c")}}
		}, field: "config.envs[0].key"},
		{name: "stop signal", mutate: func(c *runtimeapi.ContainerConfig) { c.StopSignal = runtimeapi.Signal_SIGNAL_SIGRTMAX }},
		{name: "stop signal outside the enum", mutate: func(c *runtimeapi.ContainerConfig) { c.StopSignal = 66 }, field: "config.stop_signal"},
		{name: "negative stop signal", mutate: func(c *runtimeapi.ContainerConfig) { c.StopSignal = -1 }, field: "config.stop_signal"},
		{name: "mount options", mutate: func(c *runtimeapi.ContainerConfig) {
			c.Mounts = []*runtimeapi.Mount{{HostPath: "/srv", ContainerPath: "/d", MountOptions: []string{"noexec", "nodev", "nosuid"}}}
		}},
		{name: "mount option that widens access", mutate: func(c *runtimeapi.ContainerConfig) {
			c.Mounts = []*runtimeapi.Mount{{HostPath: "/srv", ContainerPath: "/d", MountOptions: []string{"noexec", "exec"}}}
		}, field: "config.mounts[0].mount_options[1]"},
		{name: "mount option that sets propagation", mutate: func(c *runtimeapi.ContainerConfig) {
			c.Mounts = []*runtimeapi.Mount{{HostPath: "/srv", ContainerPath: "/d", MountOptions: []string{"rshared"}}}
		}, field: "config.mounts[0].mount_options[0]"},
		{name: "relative working dir", mutate: func(c *runtimeapi.ContainerConfig) { c.WorkingDir = "tmp" }, field: "config.working_dir"},
		{name: "lxcfs proc file", mutate: mount("/proc/meminfo")},
		{name: "mount into proc", mutate: mount("/proc/self/root/etc"), field: "config.mounts[0].container_path"},
		{name: "mount on proc", mutate: mount("/proc"), field: "config.mounts[0].container_path"},
		{name: "mount on root", mutate: mount("/"), field: "config.mounts[0].container_path"},
		{name: "mount on root with dot", mutate: mount("/."), field: "config.mounts[0].container_path"},
		{name: "mount escaping", mutate: mount("/data/../../etc"), field: "config.mounts[0].container_path"},
		{name: "relative mount", mutate: mount("data"), field: "config.mounts[0].container_path"},
		{name: "nul in mount", mutate: mount("/data\x00"), field: "config.mounts[0].container_path"},
		{name: "relative host path", mutate: func(c *runtimeapi.ContainerConfig) {
			c.Mounts = []*runtimeapi.Mount{{HostPath: "srv", ContainerPath: "/srv"}}
		}, field: "config.mounts[0].host_path"},
		{name: "device with dotdot", mutate: func(c *runtimeapi.ContainerConfig) {
			c.Devices = []*runtimeapi.Device{{HostPath: "/dev/../etc/passwd", ContainerPath: "/dev/x"}}
		}, field: "config.devices[0].host_path"},
		{name: "known capabilities", mutate: caps([]string{"NET_ADMIN", "cap_sys_time", "ALL"}, []string{"CAP_CHOWN"})},
		{name: "unknown capability", mutate: caps([]string{"NET_ADMIN", "CAP_MAKE_COFFEE"}, nil), field: "add_capabilities[1]"},
		{name: "unknown drop", mutate: caps(nil, []string{"FOO"}), field: "drop_capabilities[0]"},
		{name: "negative uid", mutate: func(c *runtimeapi.ContainerConfig) {
			c.Linux.SecurityContext.RunAsUser = &runtimeapi.Int64Value{Value: -2}
		}, field: "config.linux.security_context.run_as_user"},
		{name: "unified on v1", mutate: res(&runtimeapi.LinuxContainerResources{Unified: map[string]string{"memory.high": "1M"}}),
			field: "config.linux.resources.unified"},
		{name: "unified on v2", mutate: res(&runtimeapi.LinuxContainerResources{Unified: map[string]string{"memory.high": "1M"}}),
			node: &container.NodeInfo{UnifiedCgroups: true, CPUs: "0", MemoryNodes: "0"}},
		{name: "unified path", mutate: res(&runtimeapi.LinuxContainerResources{Unified: map[string]string{"../memory.max": "1"}}),
			node: &container.NodeInfo{UnifiedCgroups: true}, field: "config.linux.resources.unified"},
		{name: "unified keys the kubelet sends", mutate: res(&runtimeapi.LinuxContainerResources{Unified: map[string]string{
			"memory.high": "1073741824", "memory.oom.group": "1", "memory.swap.max": "0", "cpu.max": "max 100000",
			"cpu.weight": "100", "hugetlb.2MB.max": "4194304", "io.max": "8:0 rbps=1048576\n8:16 wiops=120"}}),
			node: &v2Node},
		{name: "unified cgroup.procs", mutate: res(&runtimeapi.LinuxContainerResources{Unified: map[string]string{"cgroup.procs": "1"}}),
			node: &v2Node, field: `config.linux.resources.unified: key "cgroup.procs"`},
		{name: "unified cgroup.subtree_control", mutate: res(&runtimeapi.LinuxContainerResources{Unified: map[string]string{"cgroup.subtree_control": "+cpu"}}),
			node: &v2Node, field: `config.linux.resources.unified: key "cgroup.subtree_control"`},
		{name: "unified memory.current", mutate: res(&runtimeapi.LinuxContainerResources{Unified: map[string]string{"memory.current": "1"}}),
			node: &v2Node, field: `config.linux.resources.unified: key "memory.current"`},
		{name: "unified Memory.High", mutate: res(&runtimeapi.LinuxContainerResources{Unified: map[string]string{"Memory.High": "1"}}),
			node: &v2Node, field: `config.linux.resources.unified: key "Memory.High"`},
		{name: "unified newline", mutate: res(&runtimeapi.LinuxContainerResources{Unified: map[string]string{"memory.high": "1\n2"}}),
			node: &v2Node, field: `config.linux.resources.unified: value of "memory.high"`},
		{name: "cpuset ok", mutate: res(&runtimeapi.LinuxContainerResources{CpusetCpus: "0-1", CpusetMems: "0"})},
		{name: "cpuset beyond node", mutate: res(&runtimeapi.LinuxContainerResources{CpusetCpus: "0-7"}),
			field: "config.linux.resources.cpuset_cpus"},
		{name: "cpuset malformed", mutate: res(&runtimeapi.LinuxContainerResources{CpusetCpus: "0-"}),
			field: "config.linux.resources.cpuset_cpus"},
		{name: "cpuset backwards", mutate: res(&runtimeapi.LinuxContainerResources{CpusetCpus: "1-0"}),
			field: "config.linux.resources.cpuset_cpus"},
		{name: "mems beyond node", mutate: res(&runtimeapi.LinuxContainerResources{CpusetMems: "1"}),
			field: "config.linux.resources.cpuset_mems"},
		{name: "negative memory", mutate: res(&runtimeapi.LinuxContainerResources{MemoryLimitInBytes: -2}),
			field: "config.linux.resources.memory_limit_in_bytes"},
		{name: "unlimited memory", mutate: res(&runtimeapi.LinuxContainerResources{MemoryLimitInBytes: -1, CpuQuota: -1})},
		{name: "swap below memory", mutate: res(&runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 1 << 30, MemorySwapLimitInBytes: 1 << 20}),
			field: "config.linux.resources.memory_swap_limit_in_bytes"},
		{name: "one byte of memory", mutate: res(&runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 1}),
			field: "config.linux.resources.memory_limit_in_bytes"},
		{name: "memory just below the minimum", mutate: res(&runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 6<<20 - 1}),
			field: "config.linux.resources.memory_limit_in_bytes"},
		{name: "memory at the minimum", mutate: res(&runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 6 << 20})},
		{name: "swap without memory", mutate: res(&runtimeapi.LinuxContainerResources{MemorySwapLimitInBytes: 64 << 20}),
			field: "config.linux.resources.memory_swap_limit_in_bytes"},
		{name: "swap with unlimited memory on v1", mutate: res(&runtimeapi.LinuxContainerResources{MemoryLimitInBytes: -1, MemorySwapLimitInBytes: 64 << 20}),
			field: "config.linux.resources.memory_swap_limit_in_bytes"},
		{name: "swap with unlimited memory on v2", mutate: res(&runtimeapi.LinuxContainerResources{MemoryLimitInBytes: -1, MemorySwapLimitInBytes: 64 << 20}),
			node: &container.NodeInfo{UnifiedCgroups: true, CPUs: "0", MemoryNodes: "0"}},
		{name: "unlimited swap", mutate: res(&runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 64 << 20, MemorySwapLimitInBytes: -1})},
		{name: "kubelet masked paths", mutate: func(c *runtimeapi.ContainerConfig) {
			c.Linux.SecurityContext.MaskedPaths = []string{"/proc/acpi", "/proc/kcore", "/sys/firmware"}
			c.Linux.SecurityContext.ReadonlyPaths = []string{"/proc/bus", "/proc/sys"}
		}},
		{name: "nul in masked path", mutate: func(c *runtimeapi.ContainerConfig) {
			c.Linux.SecurityContext.MaskedPaths = []string{"/proc/kcore", "/proc/a\x00b"}
		}, field: "config.linux.security_context.masked_paths[1]"},
		{name: "nul in read-only path", mutate: func(c *runtimeapi.ContainerConfig) {
			c.Linux.SecurityContext.ReadonlyPaths = []string{"/proc/a\x00b"}
		}, field: "config.linux.security_context.readonly_paths[0]"},
		{name: "relative masked path", mutate: func(c *runtimeapi.ContainerConfig) {
			c.Linux.SecurityContext.MaskedPaths = []string{"proc/kcore"}
		}, field: "config.linux.security_context.masked_paths[0]"},
		{name: "empty read-only path", mutate: func(c *runtimeapi.ContainerConfig) {
			c.Linux.SecurityContext.ReadonlyPaths = []string{""}
		}, field: "config.linux.security_context.readonly_paths[0]"},
		{name: "masked path too long", mutate: func(c *runtimeapi.ContainerConfig) {
			c.Linux.SecurityContext.MaskedPaths = []string{strings.Repeat("/a", 2048)}
		}, field: "config.linux.security_context.masked_paths[0]"},
		{name: "working dir with a name too long", mutate: func(c *runtimeapi.ContainerConfig) { c.WorkingDir = "/" + strings.Repeat("a", 256) },
			field: "config.working_dir"},
		{name: "working dir with the longest name", mutate: func(c *runtimeapi.ContainerConfig) { c.WorkingDir = "/" + strings.Repeat("a", 255) }},
		{name: "mount path with a name too long", mutate: mount("/" + strings.Repeat("m", 300)), field: "config.mounts[0].container_path"},
		{name: "device without container path", mutate: func(c *runtimeapi.ContainerConfig) {
			c.Devices = []*runtimeapi.Device{{HostPath: "/dev/fuse", Permissions: "rwm"}}
		}},
		{name: "host path with a name too long", mutate: func(c *runtimeapi.ContainerConfig) {
			c.Mounts = []*runtimeapi.Mount{{HostPath: "/" + strings.Repeat("h", 300), ContainerPath: "/h"}}
		}, field: "config.mounts[0].host_path"},
		{name: "device path with a name too long", mutate: func(c *runtimeapi.ContainerConfig) {
			c.Devices = []*runtimeapi.Device{{HostPath: "/dev/null", ContainerPath: "/dev/" + strings.Repeat("d", 300)}}
		}, field: "config.devices[0].container_path"},
		{name: "negative shares", mutate: res(&runtimeapi.LinuxContainerResources{CpuShares: -1}),
			field: "config.linux.resources.cpu_shares"},
		{name: "tiny quota", mutate: res(&runtimeapi.LinuxContainerResources{CpuQuota: 10}),
			field: "config.linux.resources.cpu_quota"},
		{name: "negative period", mutate: res(&runtimeapi.LinuxContainerResources{CpuPeriod: -100000}),
			field: "config.linux.resources.cpu_period"},
		{name: "kubelet resources", mutate: res(&runtimeapi.LinuxContainerResources{CpuPeriod: 100000, CpuQuota: 50000,
			CpuShares: 512, MemoryLimitInBytes: 128 << 20, MemorySwapLimitInBytes: 128 << 20, OomScoreAdj: 999})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := validContainer()
			tt.mutate(cfg)
			node := testNode
			if tt.node != nil {
				node = *tt.node
			}
			err := validateContainerConfig(cfg, node)
			if tt.field == "" {
				require.NoError(t, err)
				return
			}
			require.True(t, errdefs.IsInvalidArgument(err), "%v", err)
			require.Equal(t, codes.InvalidArgument, status.Code(errgrpc.ToGRPC(err)), "%v", err)
			require.ErrorContains(t, err, tt.field)
		})
	}
}

func TestCPUSet(t *testing.T) {
	have, err := parseCPUSet("0-3,8,10-11")
	require.NoError(t, err)
	for _, tt := range []struct {
		set    string
		within bool
	}{
		{"0", true}, {"0-3", true}, {"1,2,8", true}, {"3,8,10-11", true}, {"0-11", false}, {"4", false}, {"11-12", false},
	} {
		want, err := parseCPUSet(tt.set)
		require.NoError(t, err, tt.set)
		require.Equal(t, tt.within, cpuSetWithin(want, have), tt.set)
	}
	for _, bad := range []string{"", "a", "-1", "1-", "3-1", "1,,2", "99999999", "1, 2", "+1"} {
		_, err := parseCPUSet(bad)
		require.Error(t, err, "%q", bad)
	}
}

// UpdateContainerResources holds a memory limit to the same minimum (the swap rule
// needs the stored limits: spec.UpdateResources) and unified keys and values
// to spec.CheckUnified.
func TestValidateUpdateResources(t *testing.T) {
	unified := func(k, v string) *runtimeapi.LinuxContainerResources {
		return &runtimeapi.LinuxContainerResources{Unified: map[string]string{k: v}}
	}
	for _, tt := range []struct {
		r     *runtimeapi.LinuxContainerResources
		field string
	}{
		{unified("memory.high", "268435456"), ""},
		{unified("cpu.max", "50000 100000"), ""},
		{unified("hugetlb.1GB.rsvd.max", "0"), ""},
		{unified("cgroup.freeze", "1"), `linux.unified: key "cgroup.freeze"`},
		{unified("cgroup.kill", "1"), `linux.unified: key "cgroup.kill"`},
		{unified("cpu.pressure", "some 1 2"), `linux.unified: key "cpu.pressure"`},
		{unified("memory", "1"), `linux.unified: key "memory"`},
		{unified("pids.max", "1\x00"), `linux.unified: value of "pids.max"`},
		{&runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 1}, "linux.memory_limit_in_bytes"},
		{&runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 4 << 20}, "linux.memory_limit_in_bytes"},
		{&runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 256 << 20}, ""},
		{&runtimeapi.LinuxContainerResources{MemoryLimitInBytes: -1}, ""},
		{&runtimeapi.LinuxContainerResources{MemorySwapLimitInBytes: 64 << 20}, ""},
	} {
		err := validateResources("linux", tt.r, v2Node)
		if tt.field == "" {
			require.NoError(t, err, "%v", tt.r)
			continue
		}
		require.True(t, errdefs.IsInvalidArgument(err), "%v", err)
		require.Equal(t, codes.InvalidArgument, status.Code(errgrpc.ToGRPC(err)), "%v", err)
		require.ErrorContains(t, err, tt.field)
	}
}

// fakeSandboxes counts the calls that would make or change something; Pod is where
// container.Manager.Create starts.
type fakeSandboxes struct{ calls []string }

func (f *fakeSandboxes) Run(context.Context, *runtimeapi.PodSandboxConfig, string, func(context.Context, pod.Pod) (func(), error)) (string, error) {
	f.calls = append(f.calls, "Run")
	return "p1", nil
}

func (f *fakeSandboxes) Stop(context.Context, string) error   { return nil }
func (f *fakeSandboxes) Remove(context.Context, string) error { return nil }

func (f *fakeSandboxes) UpdateResources(context.Context, string, *runtimeapi.LinuxContainerResources, *runtimeapi.LinuxContainerResources) error {
	f.calls = append(f.calls, "UpdateResources")
	return nil
}

func (f *fakeSandboxes) Pod(id string) (pod.Pod, error) {
	f.calls = append(f.calls, "Pod")
	return pod.Pod{}, fmt.Errorf("pod %s: %w", id, errdefs.ErrNotFound)
}

func (f *fakeSandboxes) Pods() []pod.Pod { return nil }

func (f *fakeSandboxes) PausePID(context.Context, string) uint32 { return 0 }

func (f *fakeSandboxes) PodShimSocket(id string) (string, error) {
	return "", fmt.Errorf("shim of %s: %w", id, errdefs.ErrNotFound)
}

// Every RPC a unified map enters by refuses a bad one with InvalidArgument, the code
// the server's interceptor sends (errgrpc), before it asks for the pod or makes,
// records or looks anything up (UpdateContainerResources would be NotFound).
func TestUnifiedRefusedAtTheFacade(t *testing.T) {
	ctx := context.Background()
	rpcs := map[string]func(s *Service, u map[string]string) error{
		"CreateContainer": func(s *Service, u map[string]string) error {
			cfg := validContainer()
			cfg.Linux.Resources = &runtimeapi.LinuxContainerResources{Unified: u}
			_, err := s.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: "p1", Config: cfg})
			return err
		},
		"UpdateContainerResources": func(s *Service, u map[string]string) error {
			_, err := s.UpdateContainerResources(ctx, &runtimeapi.UpdateContainerResourcesRequest{
				ContainerId: "c1", Linux: &runtimeapi.LinuxContainerResources{Unified: u}})
			return err
		},
		"RunPodSandbox": func(s *Service, u map[string]string) error {
			cfg := validConfig()
			cfg.Linux = &runtimeapi.LinuxPodSandboxConfig{Resources: &runtimeapi.LinuxContainerResources{Unified: u}}
			_, err := s.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
			return err
		},
		"UpdatePodSandboxResources": func(s *Service, u map[string]string) error {
			_, err := s.UpdatePodSandboxResources(ctx, &runtimeapi.UpdatePodSandboxResourcesRequest{
				PodSandboxId: "p1", Overhead: &runtimeapi.LinuxContainerResources{Unified: u}})
			return err
		},
	}
	bad := map[string]map[string]string{
		"cgroup.procs":           {"cgroup.procs": "1"},
		"cgroup.subtree_control": {"cgroup.subtree_control": "+memory"},
		"dot dot":                {"memory/../x": "1"},
		"upper case":             {"Memory.High": "1"},
		"no file":                {"memory": "1"},
		"hidden":                 {".hidden": "1"},
		"read-only":              {"memory.current": "1"},
		"space":                  {"a b": "1"},
		"newline":                {"memory.high": "1\n2"},
		"nul":                    {"memory.high": "1\x00"},
		"one bad among good":     {"memory.high": "1", "cpu.weight": "100", "cgroup.kill": "1"},
	}
	for rpc, call := range rpcs {
		for name, u := range bad {
			t.Run(rpc+"/"+name, func(t *testing.T) {
				sb := &fakeSandboxes{}
				s := New(Options{Sandboxes: sb, Node: v2Node, Containers: container.New(container.Options{Pods: sb, Node: v2Node})})
				err := call(s, u)
				require.Equal(t, codes.InvalidArgument, status.Code(errgrpc.ToGRPC(err)), "%v", err)
				require.ErrorContains(t, err, ".unified: ")
				require.Empty(t, sb.calls, "refused after it reached the managers")
			})
		}
		// The same request with good keys gets past validation to the fakes.
		t.Run(rpc+"/good", func(t *testing.T) {
			sb := &fakeSandboxes{}
			s := New(Options{Sandboxes: sb, Node: v2Node, Containers: container.New(container.Options{Pods: sb, Node: v2Node})})
			err := call(s, map[string]string{"memory.high": "1073741824", "hugetlb.2MB.max": "0"})
			if err != nil {
				require.NotEqual(t, codes.InvalidArgument, status.Code(errgrpc.ToGRPC(err)), "%v", err)
			}
			if rpc != "UpdateContainerResources" { // its lookup is the manager's own store
				require.NotEmpty(t, sb.calls)
			}
		})
	}
}
