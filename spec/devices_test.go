package spec

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func charDev(path string, major, minor int64) specs.LinuxDevice {
	return specs.LinuxDevice{Path: path, Type: "c", Major: major, Minor: minor}
}

func withDevice(host, ctr, perms string, nodes ...specs.LinuxDevice) func(*Input) {
	return func(in *Input) {
		in.Config.Devices = append(in.Config.Devices, &runtimeapi.Device{HostPath: host, ContainerPath: ctr, Permissions: perms})
		if in.DeviceNodes == nil {
			in.DeviceNodes = map[string][]specs.LinuxDevice{}
		}
		if nodes != nil {
			in.DeviceNodes[host] = nodes
		}
	}
}

func ptr[T any](v T) *T { return &v }

func TestContainerDevices(t *testing.T) {
	denyAll := specs.LinuxDeviceCgroup{Allow: false, Access: "rwm"}
	runCases(t, []testCase{
		{name: "no devices: deny all in the cgroup", check: func(t *testing.T, s *specs.Spec) {
			require.Empty(t, s.Linux.Devices)
			require.Equal(t, []specs.LinuxDeviceCgroup{denyAll}, s.Linux.Resources.Devices)
		}},
		{name: "one device at a new path", mutate: withDevice("/dev/fuse", "/dev/myfuse", "rw", charDev("/dev/fuse", 10, 229)),
			check: func(t *testing.T, s *specs.Spec) {
				require.Equal(t, []specs.LinuxDevice{charDev("/dev/myfuse", 10, 229)}, s.Linux.Devices)
				require.Equal(t, []specs.LinuxDeviceCgroup{denyAll,
					{Allow: true, Type: "c", Major: ptr(int64(10)), Minor: ptr(int64(229)), Access: "rw"}}, s.Linux.Resources.Devices)
			}},
		{name: "empty container path: the host path", mutate: withDevice("/dev/fuse", "", "rwm", charDev("/dev/fuse", 10, 229)),
			check: func(t *testing.T, s *specs.Spec) { require.Equal(t, "/dev/fuse", s.Linux.Devices[0].Path) }},
		{name: "a directory maps every node under it", mutate: withDevice("/dev/snd", "/dev/audio", "r",
			charDev("/dev/snd/timer", 116, 33), charDev("/dev/snd/by-id/c0", 116, 2)),
			check: func(t *testing.T, s *specs.Spec) {
				require.Equal(t, "/dev/audio/timer", s.Linux.Devices[0].Path)
				require.Equal(t, "/dev/audio/by-id/c0", s.Linux.Devices[1].Path)
				require.Len(t, s.Linux.Resources.Devices, 3)
				require.Equal(t, "r", s.Linux.Resources.Devices[2].Access)
			}},
		{name: "a node outside host_path", mutate: withDevice("/dev/snd", "/dev/audio", "r", charDev("/dev/other", 1, 1)),
			wantErr: errdefs.ErrInvalidArgument},
		{name: "node not read by the caller", mutate: withDevice("/dev/fuse", "/dev/fuse", "rw"), wantErr: errdefs.ErrInvalidArgument},
		{name: "relative container path", mutate: withDevice("/dev/fuse", "dev/fuse", "rw", charDev("/dev/fuse", 10, 229)),
			wantErr: errdefs.ErrInvalidArgument},
		{name: "all single permissions", mutate: func(in *Input) {
			for _, p := range []string{"r", "w", "m", "mrw", "wr"} {
				withDevice("/dev/null", "/dev/n"+p, p, charDev("/dev/null", 1, 3))(in)
			}
		}, check: func(t *testing.T, s *specs.Spec) { require.Len(t, s.Linux.Devices, 5) }},
		{name: "empty permissions", mutate: withDevice("/dev/null", "/dev/null", "", charDev("/dev/null", 1, 3)),
			wantErr: errdefs.ErrInvalidArgument},
		{name: "unknown permission", mutate: withDevice("/dev/null", "/dev/null", "rx", charDev("/dev/null", 1, 3)),
			wantErr: errdefs.ErrInvalidArgument},
		{name: "repeated permission", mutate: withDevice("/dev/null", "/dev/null", "rr", charDev("/dev/null", 1, 3)),
			wantErr: errdefs.ErrInvalidArgument},
		{name: "owners from the security context", mutate: func(in *Input) {
			owned := charDev("/dev/loop-control", 10, 237)
			owned.UID, owned.GID = ptr(uint32(0)), ptr(uint32(6))
			withDevice("/dev/loop-control", "/dev/lc", "rw", owned)(in)
			in.DeviceOwnershipFromSecurityContext = true
			in.Config.Linux.SecurityContext.RunAsUser = &runtimeapi.Int64Value{Value: 1000}
			in.Config.Linux.SecurityContext.RunAsGroup = &runtimeapi.Int64Value{Value: 2000}
		}, check: func(t *testing.T, s *specs.Spec) {
			require.Equal(t, uint32(1000), *s.Linux.Devices[0].UID)
			require.Equal(t, uint32(2000), *s.Linux.Devices[0].GID)
		}},
		{name: "owners from the security context: run_as_user only, the group stays", mutate: func(in *Input) {
			owned := charDev("/dev/loop-control", 10, 237)
			owned.UID, owned.GID = ptr(uint32(0)), ptr(uint32(6))
			withDevice("/dev/loop-control", "/dev/lc", "rw", owned)(in)
			in.DeviceOwnershipFromSecurityContext = true
			in.Config.Linux.SecurityContext.RunAsUser = &runtimeapi.Int64Value{Value: 1000}
		}, check: func(t *testing.T, s *specs.Spec) {
			require.Equal(t, uint32(1000), *s.Linux.Devices[0].UID)
			require.Equal(t, uint32(6), *s.Linux.Devices[0].GID)
		}},
		{name: "owners from the host without the option", mutate: func(in *Input) {
			owned := charDev("/dev/loop-control", 10, 237)
			owned.UID, owned.GID = ptr(uint32(0)), ptr(uint32(6))
			withDevice("/dev/loop-control", "/dev/lc", "rw", owned)(in)
			in.Config.Linux.SecurityContext.RunAsUser = &runtimeapi.Int64Value{Value: 1000}
		}, check: func(t *testing.T, s *specs.Spec) {
			require.Equal(t, uint32(0), *s.Linux.Devices[0].UID)
			require.Equal(t, uint32(6), *s.Linux.Devices[0].GID)
		}},
	})
}

func TestReadDevices(t *testing.T) {
	if _, err := os.Stat("/dev/null"); err != nil {
		t.Skip("no /dev/null")
	}
	dir := t.TempDir()
	link := filepath.Join(dir, "null-link")
	require.NoError(t, os.Symlink("/dev/null", link))
	empty := filepath.Join(dir, "empty")
	require.NoError(t, os.Mkdir(empty, 0o755))
	regular := filepath.Join(dir, "file")
	require.NoError(t, os.WriteFile(regular, nil, 0o644))
	loop := filepath.Join(dir, "loop")
	require.NoError(t, os.Symlink(loop, loop))
	require.NoError(t, os.Symlink(filepath.Join(dir, "gone"), filepath.Join(dir, "dangling")))

	tests := []struct {
		name    string
		devices []*runtimeapi.Device
		check   func(t *testing.T, got map[string][]specs.LinuxDevice)
		wantErr error
	}{
		{name: "a char device", devices: []*runtimeapi.Device{{HostPath: "/dev/null"}},
			check: func(t *testing.T, got map[string][]specs.LinuxDevice) {
				require.Len(t, got["/dev/null"], 1)
				d := got["/dev/null"][0]
				require.Equal(t, "/dev/null", d.Path)
				require.Equal(t, "c", d.Type)
				require.Equal(t, int64(1), d.Major)
				require.Equal(t, int64(3), d.Minor)
			}},
		{name: "a symlink keeps its own path", devices: []*runtimeapi.Device{{HostPath: link}},
			check: func(t *testing.T, got map[string][]specs.LinuxDevice) {
				require.Equal(t, link, got[link][0].Path)
				require.Equal(t, int64(3), got[link][0].Minor)
			}},
		{name: "same host path twice read once", devices: []*runtimeapi.Device{{HostPath: "/dev/null"}, {HostPath: "/dev/null", ContainerPath: "/x"}},
			check: func(t *testing.T, got map[string][]specs.LinuxDevice) { require.Len(t, got, 1) }},
		{name: "a directory outside /dev", devices: []*runtimeapi.Device{{HostPath: empty}}, wantErr: errdefs.ErrInvalidArgument},
		{name: "a directory in /dev", devices: []*runtimeapi.Device{{HostPath: "/dev/shm"}},
			check: func(t *testing.T, got map[string][]specs.LinuxDevice) { require.Contains(t, got, "/dev/shm") }},
		{name: "the host's root", devices: []*runtimeapi.Device{{HostPath: "/"}}, wantErr: errdefs.ErrInvalidArgument},
		{name: "missing", devices: []*runtimeapi.Device{{HostPath: filepath.Join(dir, "nope")}}, wantErr: errdefs.ErrNotFound},
		{name: "under a file", devices: []*runtimeapi.Device{{HostPath: "/dev/null/x"}}, wantErr: errdefs.ErrNotFound},
		{name: "dangling symlink", devices: []*runtimeapi.Device{{HostPath: filepath.Join(dir, "dangling")}},
			wantErr: errdefs.ErrNotFound},
		{name: "symlink loop", devices: []*runtimeapi.Device{{HostPath: loop}}, wantErr: errdefs.ErrInvalidArgument},
		{name: "name too long", devices: []*runtimeapi.Device{{HostPath: "/dev/" + strings.Repeat("n", 300)}},
			wantErr: errdefs.ErrInvalidArgument},
		{name: "not a device", devices: []*runtimeapi.Device{{HostPath: regular}}, wantErr: errdefs.ErrInvalidArgument},
		{name: "relative", devices: []*runtimeapi.Device{{HostPath: "dev/null"}}, wantErr: errdefs.ErrInvalidArgument},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ReadDevices(tc.devices)
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			tc.check(t, got)
		})
	}
}

func TestReadDevicesFeedContainer(t *testing.T) {
	if _, err := os.Stat("/dev/null"); err != nil {
		t.Skip("no /dev/null")
	}
	in := baseInput()
	in.Config.Devices = []*runtimeapi.Device{{HostPath: "/dev/null", ContainerPath: "/dev/xnull", Permissions: "rwm"}}
	nodes, err := ReadDevices(in.Config.Devices)
	require.NoError(t, err)
	in.DeviceNodes = nodes
	s, err := Container(in)
	require.NoError(t, err)
	require.Equal(t, "/dev/xnull", s.Linux.Devices[0].Path)
}
