package container

import (
	"strings"
	"testing"

	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/errdefs"
	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/pod"
)

func TestSplitOverlay(t *testing.T) {
	const dir = "/cfs/c1"
	tests := []struct {
		name    string
		view    []mount.Mount
		want    []string
		wantErr error
	}{
		{
			name: "one layer: a read-only bind mount",
			view: []mount.Mount{{Type: "bind", Source: "/sn/snapshots/1/fs", Options: []string{"ro", "rbind"}}},
			want: []string{"workdir=/cfs/c1/work", "upperdir=/cfs/c1/fs", "lowerdir=/sn/snapshots/1/fs"},
		},
		{
			name: "layers: an overlay with lowerdirs, its other options kept",
			view: []mount.Mount{{Type: "overlay", Source: "overlay", Options: []string{"lowerdir=/sn/3/fs:/sn/2/fs:/sn/1/fs", "index=off"}}},
			want: []string{"workdir=/cfs/c1/work", "upperdir=/cfs/c1/fs", "lowerdir=/sn/3/fs:/sn/2/fs:/sn/1/fs", "index=off"},
		},
		{
			name:    "a writable snapshot",
			view:    []mount.Mount{{Type: "overlay", Source: "overlay", Options: []string{"workdir=/w", "upperdir=/u", "lowerdir=/l"}}},
			wantErr: errdefs.ErrFailedPrecondition,
		},
		{
			name:    "another snapshotter's mount",
			view:    []mount.Mount{{Type: "btrfs", Source: "/dev/sda1", Options: []string{"subvolid=5"}}},
			wantErr: errdefs.ErrNotImplemented,
		},
		{
			name:    "no mount",
			wantErr: errdefs.ErrNotImplemented,
		},
		{
			name:    "an overlay without lowerdir",
			view:    []mount.Mount{{Type: "overlay", Source: "overlay", Options: []string{"ro"}}},
			wantErr: errdefs.ErrFailedPrecondition,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := splitOverlay(tt.view, dir)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, []mount.Mount{{Type: "overlay", Source: "overlay", Options: tt.want}}, got)
		})
	}
}

func TestWritableDir(t *testing.T) {
	off := &writableLayers{}
	require.Empty(t, off.dirOf("c1", nil))
	on := &writableLayers{fsDir: "/cfs"}
	require.Equal(t, "/cfs/c1", on.dirOf("c1", nil))
	// A pod with a user namespace keeps the snapshotter's ID-mapped layer.
	require.Empty(t, on.dirOf("c1", snapshotOpts(userNSPod())))
	c := &Container{ID: "c1", WritableDir: "/cfs/c1"}
	require.Equal(t, "/cfs/c1/fs", c.WritableUpper())
	require.Equal(t, "/cfs", c.writableFs())
	require.Empty(t, (&Container{}).WritableUpper())
}

func userNSPod() pod.Pod {
	ids := []*runtimeapi.IDMapping{{HostId: 65536, ContainerId: 0, Length: 65536}}
	return pod.Pod{Config: &runtimeapi.PodSandboxConfig{Linux: &runtimeapi.LinuxPodSandboxConfig{
		SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: &runtimeapi.NamespaceOption{
			UsernsOptions: &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: ids, Gids: ids},
		}},
	}}}
}

func TestIsContainerID(t *testing.T) {
	require.True(t, isContainerID(newContainerID()))
	require.False(t, isContainerID("lost+found"))
	require.False(t, isContainerID(strings.Repeat("g", 64)))
	require.False(t, isContainerID(newContainerID()[:63]))
}
