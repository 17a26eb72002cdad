package spec

import (
	"testing"

	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// nsPathOf is the path of a namespace in the spec; it fails if the spec has none.
func nsPathOf(t *testing.T, s *specs.Spec, typ specs.LinuxNamespaceType) string {
	t.Helper()
	for _, ns := range s.Linux.Namespaces {
		if ns.Type == typ {
			return ns.Path
		}
	}
	t.Fatalf("no %s namespace in the spec", typ)
	return ""
}

func hasNS(s *specs.Spec, typ specs.LinuxNamespaceType) bool {
	for _, ns := range s.Linux.Namespaces {
		if ns.Type == typ {
			return true
		}
	}
	return false
}

func podNS(in *Input) *runtimeapi.NamespaceOption {
	return in.SandboxConfig.Linux.SecurityContext.NamespaceOptions
}

func hostNet(in *Input) {
	podNS(in).Network = runtimeapi.NamespaceMode_NODE
	in.NetNSPath = ""
}

func hostIPCMode(in *Input) {
	podNS(in).Ipc = runtimeapi.NamespaceMode_NODE
	in.ShmPath = "/dev/shm"
}

func pidMode(m runtimeapi.NamespaceMode) func(*Input) {
	return func(in *Input) { sc(in).NamespaceOptions.Pid = m }
}

func userns(mode runtimeapi.NamespaceMode, n uint32) *runtimeapi.UserNamespace {
	u := &runtimeapi.UserNamespace{Mode: mode}
	if n > 0 {
		u.Uids = []*runtimeapi.IDMapping{{HostId: n, ContainerId: 0, Length: 65536}}
		u.Gids = []*runtimeapi.IDMapping{{HostId: n, ContainerId: 0, Length: 65536}}
	}
	return u
}

func TestContainerNamespaces(t *testing.T) {
	runCases(t, []testCase{
		{name: "pod network: join the pause's net, ipc, uts; own pid and mount", check: func(t *testing.T, s *specs.Spec) {
			require.Equal(t, "/proc/42/ns/net", nsPathOf(t, s, specs.NetworkNamespace))
			require.Equal(t, "/proc/42/ns/ipc", nsPathOf(t, s, specs.IPCNamespace))
			require.Equal(t, "/proc/42/ns/uts", nsPathOf(t, s, specs.UTSNamespace))
			require.Equal(t, "", nsPathOf(t, s, specs.PIDNamespace))
			require.Equal(t, "", nsPathOf(t, s, specs.MountNamespace))
			require.False(t, hasNS(s, specs.UserNamespace))
			require.False(t, hasNS(s, specs.CgroupNamespace), "no cgroup namespace on cgroup v1")
			require.Len(t, s.Linux.Namespaces, 5)
		}},
		{name: "host network: host net and uts", mutate: hostNet, check: func(t *testing.T, s *specs.Spec) {
			require.False(t, hasNS(s, specs.NetworkNamespace))
			require.False(t, hasNS(s, specs.UTSNamespace))
			require.Equal(t, "/proc/42/ns/ipc", nsPathOf(t, s, specs.IPCNamespace))
		}},
		{name: "pod network without netns path", mutate: func(in *Input) { in.NetNSPath = "" },
			wantErr: errdefs.ErrInvalidArgument},
		{name: "host ipc", mutate: hostIPCMode, check: func(t *testing.T, s *specs.Spec) {
			require.False(t, hasNS(s, specs.IPCNamespace))
			require.Equal(t, "/proc/42/ns/net", nsPathOf(t, s, specs.NetworkNamespace))
		}},
		{name: "pid POD joins the pause's", mutate: pidMode(runtimeapi.NamespaceMode_POD), check: func(t *testing.T, s *specs.Spec) {
			require.Equal(t, "/proc/42/ns/pid", nsPathOf(t, s, specs.PIDNamespace))
		}},
		{name: "pid CONTAINER is new", mutate: pidMode(runtimeapi.NamespaceMode_CONTAINER), check: func(t *testing.T, s *specs.Spec) {
			require.Equal(t, "", nsPathOf(t, s, specs.PIDNamespace))
		}},
		{name: "pid NODE is the host's", mutate: pidMode(runtimeapi.NamespaceMode_NODE), check: func(t *testing.T, s *specs.Spec) {
			require.False(t, hasNS(s, specs.PIDNamespace))
		}},
		{name: "pid TARGET joins the target's", mutate: func(in *Input) {
			pidMode(runtimeapi.NamespaceMode_TARGET)(in)
			sc(in).NamespaceOptions.TargetId = "c0"
			in.TargetPID = 77
		}, check: func(t *testing.T, s *specs.Spec) {
			require.Equal(t, "/proc/77/ns/pid", nsPathOf(t, s, specs.PIDNamespace))
		}},
		{name: "pid TARGET without a target pid", mutate: pidMode(runtimeapi.NamespaceMode_TARGET),
			wantErr: errdefs.ErrInvalidArgument},
		{name: "unknown pid mode", mutate: pidMode(runtimeapi.NamespaceMode(9)), wantErr: errdefs.ErrInvalidArgument},
		{name: "everything from the host", mutate: func(in *Input) {
			hostNet(in)
			hostIPCMode(in)
			pidMode(runtimeapi.NamespaceMode_NODE)(in)
		}, check: func(t *testing.T, s *specs.Spec) {
			require.Equal(t, []specs.LinuxNamespace{{Type: specs.MountNamespace}}, s.Linux.Namespaces)
		}},
		{name: "cgroup v2: private cgroup namespace", mutate: func(in *Input) { in.UnifiedCgroups = true },
			check: func(t *testing.T, s *specs.Spec) { require.Equal(t, "", nsPathOf(t, s, specs.CgroupNamespace)) }},
		{name: "cgroup v2 privileged: host cgroup namespace", mutate: func(in *Input) {
			in.UnifiedCgroups = true
			privileged(in)
		}, check: func(t *testing.T, s *specs.Spec) { require.False(t, hasNS(s, specs.CgroupNamespace)) }},
	})
}

func TestContainerUserNamespace(t *testing.T) {
	runCases(t, []testCase{
		{name: "pod userns: join it and copy the mappings", mutate: func(in *Input) {
			podNS(in).UsernsOptions = userns(runtimeapi.NamespaceMode_POD, 100000)
		}, check: func(t *testing.T, s *specs.Spec) {
			require.Equal(t, "/proc/42/ns/user", nsPathOf(t, s, specs.UserNamespace))
			want := []specs.LinuxIDMapping{{ContainerID: 0, HostID: 100000, Size: 65536}}
			require.Equal(t, want, s.Linux.UIDMappings)
			require.Equal(t, want, s.Linux.GIDMappings)
		}},
		{name: "container options equal to the pod's", mutate: func(in *Input) {
			podNS(in).UsernsOptions = userns(runtimeapi.NamespaceMode_POD, 100000)
			sc(in).NamespaceOptions.UsernsOptions = userns(runtimeapi.NamespaceMode_POD, 100000)
		}, check: func(t *testing.T, s *specs.Spec) { require.True(t, hasNS(s, specs.UserNamespace)) }},
		{name: "container options differ from the pod's", mutate: func(in *Input) {
			podNS(in).UsernsOptions = userns(runtimeapi.NamespaceMode_POD, 100000)
			sc(in).NamespaceOptions.UsernsOptions = userns(runtimeapi.NamespaceMode_POD, 200000)
		}, wantErr: errdefs.ErrInvalidArgument},
		{name: "container asks for a userns the pod lacks", mutate: func(in *Input) {
			sc(in).NamespaceOptions.UsernsOptions = userns(runtimeapi.NamespaceMode_POD, 100000)
		}, wantErr: errdefs.ErrInvalidArgument},
		{name: "node userns: nothing", mutate: func(in *Input) {
			podNS(in).UsernsOptions = userns(runtimeapi.NamespaceMode_NODE, 0)
		}, check: func(t *testing.T, s *specs.Spec) {
			require.False(t, hasNS(s, specs.UserNamespace))
			require.Nil(t, s.Linux.UIDMappings)
		}},
		{name: "node userns with mappings", mutate: func(in *Input) {
			podNS(in).UsernsOptions = userns(runtimeapi.NamespaceMode_NODE, 100000)
		}, wantErr: errdefs.ErrInvalidArgument},
		{name: "pod userns without mappings", mutate: func(in *Input) {
			podNS(in).UsernsOptions = userns(runtimeapi.NamespaceMode_POD, 0)
		}, wantErr: errdefs.ErrInvalidArgument},
		{name: "container mode userns unsupported", mutate: func(in *Input) {
			podNS(in).UsernsOptions = userns(runtimeapi.NamespaceMode_CONTAINER, 100000)
		}, wantErr: errdefs.ErrInvalidArgument},
		{name: "pod userns: pod files id-mapped, shm not", mutate: func(in *Input) {
			podNS(in).UsernsOptions = userns(runtimeapi.NamespaceMode_POD, 100000)
		}, check: func(t *testing.T, s *specs.Spec) {
			require.NotNil(t, mountAt(t, s, "/etc/hosts").UIDMappings)
			require.NotNil(t, mountAt(t, s, "/etc/resolv.conf").GIDMappings)
			require.Nil(t, mountAt(t, s, "/dev/shm").UIDMappings)
		}},
		{name: "pod userns with host network: /sys bound read-only", mutate: func(in *Input) {
			podNS(in).UsernsOptions = userns(runtimeapi.NamespaceMode_POD, 100000)
			hostNet(in)
			in.RecursiveReadOnlyMounts = true
		}, check: func(t *testing.T, s *specs.Spec) {
			m := mountAt(t, s, "/sys")
			require.Equal(t, "bind", m.Type)
			require.Equal(t, []string{"rbind", "rro", "nosuid", "nodev", "noexec"}, m.Options)
		}},
		{name: "pod userns with host network, no rro: ro", mutate: func(in *Input) {
			podNS(in).UsernsOptions = userns(runtimeapi.NamespaceMode_POD, 100000)
			hostNet(in)
		}, check: func(t *testing.T, s *specs.Spec) {
			require.Contains(t, mountAt(t, s, "/sys").Options, "ro")
		}},
	})
}

// pauseless makes the input that of a pod without a pause process.
func pauseless(in *Input) {
	in.SandboxPID, in.Pauseless = 0, true
	in.IPCNSPath, in.UTSNSPath = "/run/shimd/ipcns/sb1", "/run/shimd/utsns/sb1"
}

func TestContainerNamespacesPauseless(t *testing.T) {
	runCases(t, []testCase{
		{name: "join the pinned net, ipc and uts by path", mutate: pauseless, check: func(t *testing.T, s *specs.Spec) {
			require.Equal(t, "/run/shimd/netns/sb1", nsPathOf(t, s, specs.NetworkNamespace))
			require.Equal(t, "/run/shimd/ipcns/sb1", nsPathOf(t, s, specs.IPCNamespace))
			require.Equal(t, "/run/shimd/utsns/sb1", nsPathOf(t, s, specs.UTSNamespace))
			require.Equal(t, "", nsPathOf(t, s, specs.PIDNamespace))
			require.Equal(t, "podhost", s.Hostname)
			require.Len(t, s.Linux.Namespaces, 5)
		}},
		{name: "host network: host net and uts, pinned ipc", mutate: func(in *Input) {
			pauseless(in)
			hostNet(in)
			in.UTSNSPath = ""
		}, check: func(t *testing.T, s *specs.Spec) {
			require.False(t, hasNS(s, specs.NetworkNamespace))
			require.False(t, hasNS(s, specs.UTSNamespace))
			require.Equal(t, "/run/shimd/ipcns/sb1", nsPathOf(t, s, specs.IPCNamespace))
		}},
		{name: "host ipc: no ipc namespace", mutate: func(in *Input) {
			pauseless(in)
			hostIPCMode(in)
			in.IPCNSPath = ""
		}, check: func(t *testing.T, s *specs.Spec) { require.False(t, hasNS(s, specs.IPCNamespace)) }},
		{name: "no pinned ipc namespace", mutate: func(in *Input) { pauseless(in); in.IPCNSPath = "" },
			wantErr: errdefs.ErrInvalidArgument},
		{name: "no pinned uts namespace", mutate: func(in *Input) { pauseless(in); in.UTSNSPath = "" },
			wantErr: errdefs.ErrInvalidArgument},
		{name: "pid POD: no pause to share it, a PID namespace of its own", mutate: func(in *Input) {
			pauseless(in)
			pidMode(runtimeapi.NamespaceMode_POD)(in)
		}, check: func(t *testing.T, s *specs.Spec) { require.Equal(t, "", nsPathOf(t, s, specs.PIDNamespace)) }},
		{name: "pod userns: no pause to join", mutate: func(in *Input) {
			pauseless(in)
			podNS(in).UsernsOptions = userns(runtimeapi.NamespaceMode_POD, 100000)
		}, wantErr: errdefs.ErrInvalidArgument},
		{name: "no pid and not pause-less", mutate: func(in *Input) { in.SandboxPID = 0 },
			wantErr: errdefs.ErrInvalidArgument},
	})
}
