package image

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/continuity/fs"
	"github.com/containerd/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ImageFsInfo reports the filesystem of each snapshotter in use: committed snapshots
// (image layers) as the image filesystem, active ones (container layers) as the
// container filesystem, both at the snapshotter's root directory. With a split image
// filesystem (Options.ContainerFsDir) the container filesystem is that directory's,
// with the usage of the writable layers there; every snapshot, active ones included
// (pods' pause containers, pods with a user namespace), counts on the image
// filesystem, where it lies. The kubelet sees the split from the two mountpoints.
func (s *Service) ImageFsInfo(ctx context.Context, _ *runtimeapi.ImageFsInfoRequest) (*runtimeapi.ImageFsInfoResponse, error) {
	resp := &runtimeapi.ImageFsInfoResponse{}
	split := s.opts.ContainerFsDir != ""
	seen := map[string]bool{}
	for _, sn := range s.opts.Snapshotters {
		if seen[sn] {
			continue
		}
		seen[sn] = true
		root, err := s.SnapshotterRoot(ctx, sn)
		if err != nil {
			return nil, err
		}
		image, container, err := s.usage(ctx, sn)
		if err != nil {
			return nil, err
		}
		now := time.Now().UnixNano()
		if split {
			image.Add(container)
		} else {
			resp.ContainerFilesystems = append(resp.ContainerFilesystems, fsUsage(root, now, container))
		}
		resp.ImageFilesystems = append(resp.ImageFilesystems, fsUsage(root, now, image))
	}
	if split {
		u, err := dirUsage(ctx, s.opts.ContainerFsDir)
		if err != nil {
			return nil, fmt.Errorf("usage of container_fs_dir: %w", err)
		}
		resp.ContainerFilesystems = append(resp.ContainerFilesystems, fsUsage(s.opts.ContainerFsDir, time.Now().UnixNano(), u))
	}
	return resp, nil
}

func fsUsage(root string, now int64, u snapshots.Usage) *runtimeapi.FilesystemUsage {
	return &runtimeapi.FilesystemUsage{
		Timestamp:  now,
		FsId:       &runtimeapi.FilesystemIdentifier{Mountpoint: root},
		UsedBytes:  &runtimeapi.UInt64Value{Value: uint64(u.Size)},
		InodesUsed: &runtimeapi.UInt64Value{Value: uint64(u.Inodes)},
	}
}

// usage adds up the snapshots of shimd's namespace: committed and active.
func (s *Service) usage(ctx context.Context, snapshotter string) (committed, active snapshots.Usage, err error) {
	sn := s.opts.Client.SnapshotService(snapshotter)
	var infos []snapshots.Info
	if err := sn.Walk(ctx, func(_ context.Context, info snapshots.Info) error {
		infos = append(infos, info)
		return nil
	}); err != nil {
		return committed, active, fmt.Errorf("walk snapshots of %s: %w", snapshotter, err)
	}
	for _, info := range infos {
		u, err := sn.Usage(ctx, info.Name)
		if err != nil {
			continue // removed meanwhile
		}
		if info.Kind == snapshots.KindCommitted {
			committed.Add(u)
		} else {
			active.Add(u)
		}
	}
	return committed, active, nil
}

// SnapshotterRoot is the directory where a snapshotter keeps its data (asked of
// containerd once, then remembered).
func (s *Service) SnapshotterRoot(ctx context.Context, snapshotter string) (string, error) {
	p, err := s.snapshotterPlugin(ctx, snapshotter)
	if err != nil {
		return "", err
	}
	if p.root == "" {
		return "", fmt.Errorf("snapshotter %s reports no root directory", snapshotter)
	}
	return p.root, nil
}

// snapshotterFacts are what containerd says of a snapshotter plugin.
type snapshotterFacts struct {
	root   string // where it keeps its data ("" if it does not say)
	rebase bool   // it commits a snapshot onto a parent it was not prepared on
}

// snapshotterPlugin asks containerd about a snapshotter once, then remembers.
func (s *Service) snapshotterPlugin(ctx context.Context, snapshotter string) (snapshotterFacts, error) {
	if v, ok := s.snapshotters.Load(snapshotter); ok {
		return v.(snapshotterFacts), nil
	}
	resp, err := s.opts.Client.IntrospectionService().Plugins(ctx, fmt.Sprintf(`type==io.containerd.snapshotter.v1,id==%s`, snapshotter))
	if err != nil {
		return snapshotterFacts{}, fmt.Errorf("find snapshotter %s: %w", snapshotter, err)
	}
	if len(resp.GetPlugins()) == 0 {
		return snapshotterFacts{}, fmt.Errorf("snapshotter %s: %w", snapshotter, errdefs.ErrNotFound)
	}
	var f snapshotterFacts
	for _, p := range resp.GetPlugins() {
		f.root = cmp.Or(f.root, p.GetExports()["root"])
		f.rebase = f.rebase || slices.Contains(p.GetCapabilities(), snapshots.RebaseCap)
	}
	v, _ := s.snapshotters.LoadOrStore(snapshotter, f)
	return v.(snapshotterFacts), nil
}

// dirUsage adds up the disk usage of dir's entries (the containers' writable layers);
// an entry removed while it is measured (its container removed) is left out.
func dirUsage(ctx context.Context, dir string) (snapshots.Usage, error) {
	var total snapshots.Usage
	entries, err := os.ReadDir(dir)
	if err != nil {
		return total, err
	}
	for _, e := range entries {
		u, err := fs.DiskUsage(ctx, filepath.Join(dir, e.Name()))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return total, err
		}
		total.Add(snapshots.Usage{Size: u.Size, Inodes: u.Inodes})
	}
	return total, nil
}
