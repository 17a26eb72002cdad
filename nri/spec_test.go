package nri

import (
	"testing"

	"github.com/containerd/nri/pkg/api"
	nrigen "github.com/containerd/nri/pkg/runtime-tools/generate"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/stretchr/testify/require"
)

var _ nrigen.UnderlyingGenerator = (*specGen)(nil)

// An adjustment as a plugin returns it, applied through NRI's generator to a spec.
func TestAdjustSpec(t *testing.T) {
	base := func() *specs.Spec {
		return &specs.Spec{
			Process: &specs.Process{Args: []string{"sleep", "1"}, Env: []string{"PATH=/bin", "KEEP=1", "DROP=1"}},
			Mounts:  []specs.Mount{{Destination: "/proc", Type: "proc"}, {Destination: "/data", Source: "/old", Type: "bind"}},
			Linux: &specs.Linux{
				Devices:    []specs.LinuxDevice{{Path: "/dev/old", Type: "c", Major: 1, Minor: 5}},
				Namespaces: []specs.LinuxNamespace{{Type: specs.NetworkNamespace, Path: "/run/netns/x"}, {Type: specs.IPCNamespace}},
			},
		}
	}
	tests := []struct {
		name   string
		adjust func(a *api.ContainerAdjustment)
		check  func(t *testing.T, s *specs.Spec)
	}{
		{name: "env replaces, adds and removes", adjust: func(a *api.ContainerAdjustment) {
			a.AddEnv("PATH", "/usr/bin")
			a.AddEnv("NEW", "x")
			a.RemoveEnv("DROP")
		}, check: func(t *testing.T, s *specs.Spec) {
			require.ElementsMatch(t, []string{"PATH=/usr/bin", "KEEP=1", "NEW=x"}, s.Process.Env)
		}},
		{name: "mount replaces one at the same destination", adjust: func(a *api.ContainerAdjustment) {
			a.AddMount(&api.Mount{Destination: "/data", Source: "/new", Type: "bind", Options: []string{"ro"}})
		}, check: func(t *testing.T, s *specs.Spec) {
			require.Len(t, s.Mounts, 2)
			for _, m := range s.Mounts {
				if m.Destination == "/data" {
					require.Equal(t, "/new", m.Source)
				}
			}
		}},
		{name: "device added with its cgroup rule, old one removed", adjust: func(a *api.ContainerAdjustment) {
			a.AddDevice(&api.LinuxDevice{Path: "/dev/new", Type: "c", Major: 1, Minor: 3})
			a.RemoveDevice("/dev/old")
		}, check: func(t *testing.T, s *specs.Spec) {
			require.Equal(t, []specs.LinuxDevice{{Path: "/dev/new", Type: "c", Major: 1, Minor: 3}}, s.Linux.Devices)
			require.Len(t, s.Linux.Resources.Devices, 1)
			require.True(t, s.Linux.Resources.Devices[0].Allow)
		}},
		{name: "resources, oom score, annotation, args, sysctl", adjust: func(a *api.ContainerAdjustment) {
			a.SetLinuxMemoryLimit(64 << 20)
			a.SetLinuxCPUShares(512)
			a.SetLinuxCPUSetCPUs("0")
			a.SetLinuxOomScoreAdj(api.Int(500).Get())
			a.AddAnnotation("k", "v")
			a.SetArgs([]string{"true"})
			a.SetLinuxSysctl("net.ipv4.ip_forward", "1")
		}, check: func(t *testing.T, s *specs.Spec) {
			require.Equal(t, int64(64<<20), *s.Linux.Resources.Memory.Limit)
			require.Equal(t, uint64(512), *s.Linux.Resources.CPU.Shares)
			require.Equal(t, "0", s.Linux.Resources.CPU.Cpus)
			require.Equal(t, 500, *s.Process.OOMScoreAdj)
			require.Equal(t, "v", s.Annotations["k"])
			require.Equal(t, []string{"true"}, s.Process.Args)
			require.Equal(t, "1", s.Linux.Sysctl["net.ipv4.ip_forward"])
		}},
		{name: "namespace replaced and removed", adjust: func(a *api.ContainerAdjustment) {
			a.AddOrReplaceNamespace(&api.LinuxNamespace{Type: "network", Path: "/run/netns/y"})
			a.RemoveNamespace(&api.LinuxNamespace{Type: "ipc"})
		}, check: func(t *testing.T, s *specs.Spec) {
			require.Equal(t, []specs.LinuxNamespace{{Type: specs.NetworkNamespace, Path: "/run/netns/y"}}, s.Linux.Namespaces)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := &api.ContainerAdjustment{}
			tt.adjust(a)
			s := base()
			require.NoError(t, nrigen.SpecGenerator(&specGen{s: s}).Adjust(a))
			tt.check(t, s)
		})
	}
}

func TestSpecGenRejects(t *testing.T) {
	g := &specGen{s: &specs.Spec{}}
	require.Error(t, g.AddOrReplaceLinuxNamespace("bogus", ""))
	require.Error(t, g.SetLinuxRootPropagation("sideways"))
	require.NoError(t, g.SetLinuxRootPropagation("rslave"))
}
