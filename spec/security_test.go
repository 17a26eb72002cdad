package spec

import (
	"context"
	"slices"
	"testing"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/cap"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// defaultSpec is containerd's default spec, for its capabilities and paths.
func defaultSpec(t *testing.T) *specs.Spec {
	t.Helper()
	ctx := namespaces.WithNamespace(context.Background(), "shimd")
	s, err := oci.GenerateSpec(ctx, nil, &containers.Container{ID: "x"})
	require.NoError(t, err)
	return s
}

func privileged(in *Input) {
	sc(in).Privileged = true
	in.SandboxConfig.Linux.SecurityContext.Privileged = true
	in.HostDevices = []specs.LinuxDevice{charDev("/dev/kmsg", 1, 11), charDev("/dev/fuse", 10, 229)}
}

func caps(add, drop []string) func(*Input) {
	return func(in *Input) {
		sc(in).Capabilities = &runtimeapi.Capability{AddCapabilities: add, DropCapabilities: drop}
	}
}

// wantCaps checks the bounding, effective and permitted sets, in any order.
func wantCaps(want ...string) func(*testing.T, *specs.Spec) {
	return func(t *testing.T, s *specs.Spec) {
		c := s.Process.Capabilities
		for _, set := range [][]string{c.Bounding, c.Effective, c.Permitted} {
			require.ElementsMatch(t, want, set)
		}
		require.Empty(t, c.Ambient)
	}
}

func TestContainerCapabilities(t *testing.T) {
	def := defaultSpec(t).Process.Capabilities.Bounding
	without := func(caps []string, drop ...string) []string {
		return slices.DeleteFunc(slices.Clone(caps), func(c string) bool { return slices.Contains(drop, c) })
	}
	all := baseInput().AllCapabilities
	runCases(t, []testCase{
		{name: "default set is containerd's", check: wantCaps(def...)},
		{name: "add without prefix", mutate: caps([]string{"NET_ADMIN", "sys_time"}, nil),
			check: wantCaps(append(slices.Clone(def), "CAP_NET_ADMIN", "CAP_SYS_TIME")...)},
		{name: "add with prefix, duplicates once", mutate: caps([]string{"CAP_NET_ADMIN", "net_admin", "CHOWN"}, nil),
			check: wantCaps(append(slices.Clone(def), "CAP_NET_ADMIN")...)},
		{name: "drop", mutate: caps(nil, []string{"CHOWN", "cap_kill"}), check: wantCaps(without(def, "CAP_CHOWN", "CAP_KILL")...)},
		{name: "add ALL", mutate: caps([]string{"ALL"}, nil), check: wantCaps(all...)},
		{name: "add all, any case", mutate: caps([]string{"all"}, nil), check: wantCaps(all...)},
		{name: "add ALL drop one", mutate: caps([]string{"ALL"}, []string{"CHOWN"}), check: wantCaps(without(all, "CAP_CHOWN")...)},
		{name: "drop ALL", mutate: caps(nil, []string{"ALL"}), check: wantCaps()},
		{name: "drop ALL add one", mutate: caps([]string{"NET_BIND_SERVICE"}, []string{"ALL"}), check: wantCaps("CAP_NET_BIND_SERVICE")},
		{name: "add ALL and drop ALL", mutate: caps([]string{"ALL"}, []string{"ALL"}), check: wantCaps()},
		{name: "drop wins over add", mutate: caps([]string{"NET_ADMIN"}, []string{"NET_ADMIN"}), check: wantCaps(def...)},
		{name: "ALL with no list from the caller: known caps", mutate: func(in *Input) {
			in.AllCapabilities = nil
			caps([]string{"ALL"}, nil)(in)
		}, check: wantCaps(cap.Known()...)},
		{name: "caller's list normalised", mutate: func(in *Input) {
			in.AllCapabilities = []string{"chown", "CAP_KILL"}
			caps([]string{"ALL"}, nil)(in)
		}, check: wantCaps("CAP_CHOWN", "CAP_KILL")},
		{name: "empty name", mutate: caps([]string{""}, nil), wantErr: errdefs.ErrInvalidArgument},
		{name: "bare CAP_", mutate: caps(nil, []string{"CAP_"}), wantErr: errdefs.ErrInvalidArgument},
		{name: "ambient", mutate: func(in *Input) {
			sc(in).Capabilities = &runtimeapi.Capability{AddAmbientCapabilities: []string{"NET_RAW", "SYS_TIME"}}
		}, check: func(t *testing.T, s *specs.Spec) {
			c := s.Process.Capabilities
			require.Equal(t, []string{"CAP_NET_RAW", "CAP_SYS_TIME"}, c.Ambient)
			require.Equal(t, []string{"CAP_NET_RAW", "CAP_SYS_TIME"}, c.Inheritable)
			require.Contains(t, c.Bounding, "CAP_SYS_TIME")
			require.Contains(t, c.Permitted, "CAP_SYS_TIME")
		}},
		{name: "ambient ALL", mutate: func(in *Input) {
			sc(in).Capabilities = &runtimeapi.Capability{AddAmbientCapabilities: []string{"ALL"}}
		}, wantErr: errdefs.ErrInvalidArgument},
	})
}

func TestContainerPrivileged(t *testing.T) {
	runCases(t, []testCase{
		{name: "privileged", mutate: privileged, check: func(t *testing.T, s *specs.Spec) {
			wantCaps(baseInput().AllCapabilities...)(t, s)
			require.Nil(t, s.Linux.MaskedPaths)
			require.Nil(t, s.Linux.ReadonlyPaths)
			require.Contains(t, mountAt(t, s, "/sys").Options, "rw")
			require.NotContains(t, mountAt(t, s, "/sys").Options, "ro")
			require.Contains(t, mountAt(t, s, "/sys/fs/cgroup").Options, "rw")
			require.Equal(t, []specs.LinuxDevice{charDev("/dev/kmsg", 1, 11), charDev("/dev/fuse", 10, 229)}, s.Linux.Devices)
			require.Equal(t, []specs.LinuxDeviceCgroup{{Allow: true, Access: "rwm"}}, s.Linux.Resources.Devices)
			require.Nil(t, s.Linux.Seccomp)
			require.Empty(t, s.Process.ApparmorProfile)
		}},
		{name: "privileged in a pod that is not", mutate: func(in *Input) {
			privileged(in)
			in.SandboxConfig.Linux.SecurityContext.Privileged = false
		}, wantErr: errdefs.ErrInvalidArgument},
		{name: "privileged ignores masked paths given", mutate: func(in *Input) {
			privileged(in)
			sc(in).MaskedPaths = []string{"/proc/kcore"}
			sc(in).ReadonlyPaths = []string{"/proc/sys"}
		}, check: func(t *testing.T, s *specs.Spec) {
			require.Nil(t, s.Linux.MaskedPaths)
			require.Nil(t, s.Linux.ReadonlyPaths)
		}},
		{name: "privileged drops seccomp RuntimeDefault", mutate: func(in *Input) {
			privileged(in)
			sc(in).Seccomp = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}
		}, check: func(t *testing.T, s *specs.Spec) { require.Nil(t, s.Linux.Seccomp) }},
		{name: "privileged keeps a config device's entry", mutate: func(in *Input) {
			privileged(in)
			withDevice("/dev/fuse", "/dev/fuse", "r", charDev("/dev/fuse", 10, 229))(in)
		}, check: func(t *testing.T, s *specs.Spec) {
			require.Len(t, s.Linux.Devices, 2)
		}},
		{name: "privileged ignores cap drops", mutate: func(in *Input) {
			privileged(in)
			caps(nil, []string{"ALL"})(in)
		}, check: wantCaps(baseInput().AllCapabilities...)},
		{name: "SELinux labels", mutate: func(in *Input) {
			in.SELinuxProcessLabel, in.SELinuxMountLabel = "u:r:container_t:s0:c1,c2", "u:object_r:container_file_t:s0:c1,c2"
		}, check: func(t *testing.T, s *specs.Spec) {
			require.Equal(t, "u:r:container_t:s0:c1,c2", s.Process.SelinuxLabel)
			require.Equal(t, "u:object_r:container_file_t:s0:c1,c2", s.Linux.MountLabel)
		}},
		{name: "privileged: no SELinux process label, the mount label stays", mutate: func(in *Input) {
			privileged(in)
			in.SELinuxProcessLabel, in.SELinuxMountLabel = "u:r:container_t:s0:c1,c2", "u:object_r:container_file_t:s0:c1,c2"
		}, check: func(t *testing.T, s *specs.Spec) {
			require.Empty(t, s.Process.SelinuxLabel)
			require.Equal(t, "u:object_r:container_file_t:s0:c1,c2", s.Linux.MountLabel)
		}},
		{name: "no SELinux: no labels", check: func(t *testing.T, s *specs.Spec) {
			require.Empty(t, s.Process.SelinuxLabel)
			require.Empty(t, s.Linux.MountLabel)
		}},
		{name: "not privileged: read-only sysfs and cgroupfs", check: func(t *testing.T, s *specs.Spec) {
			require.Contains(t, mountAt(t, s, "/sys").Options, "ro")
			require.Contains(t, mountAt(t, s, "/sys/fs/cgroup").Options, "ro")
		}},
	})
}

func TestContainerMaskedPaths(t *testing.T) {
	runCases(t, []testCase{
		// procMount Unmasked: the kubelet sends empty lists, which arrive as nil.
		{name: "nil: nothing masked (the CRI lists are authoritative)", check: func(t *testing.T, s *specs.Spec) {
			require.Empty(t, s.Linux.MaskedPaths)
			require.Empty(t, s.Linux.ReadonlyPaths)
		}},
		{name: "given lists replace the defaults", mutate: func(in *Input) {
			sc(in).MaskedPaths = []string{"/proc/a", "/proc/b"}
			sc(in).ReadonlyPaths = []string{"/proc/c"}
		}, check: func(t *testing.T, s *specs.Spec) {
			require.Equal(t, []string{"/proc/a", "/proc/b"}, s.Linux.MaskedPaths)
			require.Equal(t, []string{"/proc/c"}, s.Linux.ReadonlyPaths)
		}},
		{name: "empty non-nil lists: nothing masked", mutate: func(in *Input) {
			sc(in).MaskedPaths = []string{}
			sc(in).ReadonlyPaths = []string{}
		}, check: func(t *testing.T, s *specs.Spec) {
			require.Empty(t, s.Linux.MaskedPaths)
			require.Empty(t, s.Linux.ReadonlyPaths)
		}},
		{name: "only masked given: no read-only paths", mutate: func(in *Input) {
			sc(in).MaskedPaths = []string{"/proc/kcore"}
		}, check: func(t *testing.T, s *specs.Spec) {
			require.Equal(t, []string{"/proc/kcore"}, s.Linux.MaskedPaths)
			require.Empty(t, s.Linux.ReadonlyPaths)
		}},
	})
}
