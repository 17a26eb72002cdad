package container

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/continuity/fs"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/moby/sys/mountinfo"
	"github.com/opencontainers/image-spec/identity"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/image"
	"github.com/shimd/shimd/pod"
)

// Image volumes (CRI Mount.image, the kubelet's ImageVolume feature): an image the
// kubelet has pulled is mounted read-only into a container. Each image is mounted
// once per pod, at <state>/image-volumes/<sandbox>/<manifest digest>, from a
// read-only view snapshot keyed imageVolumePrefix<sandbox>/<manifest digest> and
// labelled as a garbage-collection root; the container bind-mounts it (or a
// directory in it). RemovePodSandbox unmounts and removes them; recovery removes
// those of pods that are gone.
const (
	imageVolumeDirName = "image-volumes"
	imageVolumePrefix  = "shimd-imagevolume/"
)

// imageVolumes mounts images as read-only volumes of a pod's containers, one mount
// per pod and image, and removes them with the pod.
type imageVolumes struct {
	m  *Manager
	mu sync.Mutex // held while an image volume is mounted
}

func (v *imageVolumes) dir(sandboxID string) string {
	return filepath.Join(v.m.opts.StateDir, imageVolumeDirName, sandboxID)
}

// mount mounts the images c's config mounts as volumes and returns the
// config with those mounts' host paths set to them and their images' ids in
// image.image_ref; other mounts are unchanged.
func (v *imageVolumes) mount(ctx context.Context, c *Container, sb pod.Pod, snapshotter string) (*runtimeapi.ContainerConfig, error) {
	cfg := c.Config
	for i, m := range c.Config.GetMounts() {
		if m.GetImage() == nil {
			continue
		}
		field := fmt.Sprintf("config.mounts[%d]", i)
		if m.GetHostPath() != "" {
			return nil, invalid(field+".host_path", "must be empty for an image volume")
		}
		if !m.GetReadonly() {
			return nil, invalid(field+".readonly", "must be true: an image volume is read-only")
		}
		if u := sb.UserNamespace(); u != nil && (!sameMappings(m.GetUidMappings(), u.GetUids()) || !sameMappings(m.GetGidMappings(), u.GetGids())) {
			return nil, invalid(field, "an image volume in a pod with its own user namespace takes the pod's id mappings or none")
		}
		img, err := v.m.opts.Images.Find(ctx, m.GetImage().GetImage())
		if err != nil {
			return nil, fmt.Errorf("%s.image: %w", field, err)
		}
		target, err := v.volume(ctx, sb, img, snapshotter)
		if err != nil {
			return nil, fmt.Errorf("%s: image volume %s: %w", field, m.GetImage().GetImage(), err)
		}
		if sub := m.GetImageSubPath(); sub != "" {
			if target, err = imageSubPath(target, sub); err != nil {
				return nil, invalid(field+".image_sub_path", "%q %v", sub, err)
			}
		}
		if cfg == c.Config {
			cfg = proto.Clone(c.Config).(*runtimeapi.ContainerConfig)
		}
		cfg.Mounts[i].HostPath = target
		// The image's id, as PullImage answers it: ContainerStatus reports it
		// (ImageSpec.image_ref, KEP-5365) for the kubelet's image volume status.
		cfg.Mounts[i].Image.ImageRef = img.ID
		if sb.UserNamespace() != nil {
			// The volume is id-mapped to the pod already (volume); the kubelet sends
			// the pod's mappings with every mount of such a pod, and an id-mapped
			// mount cannot be id-mapped again.
			cfg.Mounts[i].UidMappings, cfg.Mounts[i].GidMappings = nil, nil
		}
	}
	return cfg, nil
}

// volume mounts img for the pod unless it is mounted, and returns where. In a pod
// with its own user namespace the volume is id-mapped to it, so that the image's
// root-owned files are root's in the pod: an overlay cannot be id-mapped itself, so
// containerd's mount package maps its layers ("uidmap=" options) before mounting it.
func (v *imageVolumes) volume(ctx context.Context, sb pod.Pod, img *image.Image, snapshotter string) (string, error) {
	sandboxID := sb.ID
	target := filepath.Join(v.dir(sandboxID), img.Target.Digest.Encoded())
	v.mu.Lock() // mounting is rare: one at a time
	defer v.mu.Unlock()
	if mounted, err := mountinfo.Mounted(target); err == nil && mounted {
		return target, nil
	}
	chainID := identity.ChainID(img.Config.RootFS.DiffIDs).String()
	if len(img.Config.RootFS.DiffIDs) > 0 {
		if err := ensureUnpacked(ctx, v.m.ctrd, img, snapshotter, chainID); err != nil {
			return "", err
		}
	} else {
		chainID = ""
	}
	// The directory first: a view snapshot never exists without it, so removal can
	// find every view from the directory alone. No other host user may reach an
	// image's files through it (CVE-2021-41103): the pod's directory is root's only.
	if err := os.MkdirAll(filepath.Dir(v.dir(sandboxID)), 0o711); err != nil {
		return "", err
	}
	if err := os.Mkdir(v.dir(sandboxID), 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return "", err
	}
	if err := os.Chmod(v.dir(sandboxID), 0o700); err != nil { // made 0755 by an older shimd
		return "", err
	}
	if err := os.Mkdir(target, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return "", err
	}
	sn := v.m.opts.Client.SnapshotService(snapshotter)
	key := imageVolumeKey(sandboxID, img.Target.Digest.Encoded())
	mounts, err := sn.View(ctx, key, chainID, snapshots.WithLabels(map[string]string{
		"containerd.io/gc.root": time.Now().UTC().Format(time.RFC3339),
	}))
	if errdefs.IsAlreadyExists(err) {
		mounts, err = sn.Mounts(ctx, key)
	}
	if err != nil {
		return "", fmt.Errorf("view snapshot: %w", err)
	}
	u := sb.UserNamespace()
	if u != nil {
		mounts = idMappedOverlays(mounts, u)
	}
	if err := mount.All(mounts, target); err != nil {
		return "", fmt.Errorf("mount: %w", err)
	}
	if u != nil && len(mounts) == 1 && mounts[0].Type != "overlay" {
		// A one-layer view is a read-only bind mount, which containerd's mount
		// package remounts read-only and returns from before it applies "uidmap=":
		// map the mounted tree here instead.
		if err := idMapTree(target, u); err != nil {
			_ = mount.UnmountAll(target, 0)
			return "", fmt.Errorf("id-map the image volume: %w", err)
		}
	}
	log.G(ctx).WithField("image", img.ID).WithField("path", target).Info("image volume mounted")
	return target, nil
}

// imageSubPath is the directory sub inside the mounted image root, which it may not
// leave: no ".." element, and symbolic links are resolved inside root.
func imageSubPath(root, sub string) (string, error) {
	if filepath.IsAbs(sub) {
		return "", errors.New("is not relative")
	}
	for _, part := range strings.Split(sub, "/") {
		if part == ".." {
			return "", errors.New("has a '..' element") // as Kubernetes validates a subPath
		}
	}
	p, err := fs.RootPath(root, sub)
	if err != nil {
		return "", err
	}
	if p != root && !strings.HasPrefix(p, root+string(filepath.Separator)) {
		return "", errors.New("leaves the image")
	}
	st, err := os.Stat(p)
	if err != nil {
		return "", errors.New("is not in the image")
	}
	if !st.IsDir() {
		return "", errors.New("is not a directory")
	}
	return p, nil
}

func imageVolumeKey(sandboxID, digest string) string {
	return imageVolumePrefix + sandboxID + "/" + digest
}

// remove unmounts and removes the image volumes of sandboxID: each
// directory under its volume directory, with the view snapshot of the same name.
func (v *imageVolumes) remove(ctx context.Context, sandboxID, snapshotter string) error {
	dir := v.dir(sandboxID)
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	sn := v.m.opts.Client.SnapshotService(snapshotter)
	for _, e := range entries {
		target := filepath.Join(dir, e.Name())
		if err := mount.UnmountAll(target, 0); err != nil {
			return fmt.Errorf("unmount image volume %s: %w", target, err)
		}
		if err := sn.Remove(ctx, imageVolumeKey(sandboxID, e.Name())); err != nil && !errdefs.IsNotFound(err) {
			return fmt.Errorf("remove image volume snapshot: %w", err)
		}
		if err := os.Remove(target); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	if err := os.Remove(dir); err != nil && !os.IsNotExist(err) {
		return err
	}
	return nil
}

// sweepImageVolumes, at recovery, removes the image volumes of pods that no longer
// exist (a RemovePodSandbox interrupted by a crash), and view snapshots whose
// directory is gone (the state directory does not survive a reboot; neither do the
// mounts, so such a view serves nothing and is made again when asked for).
func (v *imageVolumes) sweep(ctx context.Context) {
	base := filepath.Join(v.m.opts.StateDir, imageVolumeDirName)
	entries, _ := os.ReadDir(base)
	for _, sn := range v.m.opts.Handlers.Snapshotters() {
		for _, e := range entries {
			if _, err := v.m.opts.Pods.Pod(e.Name()); err != nil {
				if err := v.remove(ctx, e.Name(), sn); err != nil {
					log.G(ctx).WithError(err).WithField("sandbox", e.Name()).Warn("remove image volumes of a removed pod")
				}
			}
		}
		var stale []string
		_ = v.m.opts.Client.SnapshotService(sn).Walk(ctx, func(_ context.Context, info snapshots.Info) error {
			if rest, ok := strings.CutPrefix(info.Name, imageVolumePrefix); ok {
				if _, err := os.Stat(filepath.Join(base, rest)); os.IsNotExist(err) {
					stale = append(stale, info.Name)
				}
			}
			return nil
		})
		for _, key := range stale {
			if err := v.m.opts.Client.SnapshotService(sn).Remove(ctx, key); err != nil && !errdefs.IsNotFound(err) {
				log.G(ctx).WithError(err).WithField("snapshot", key).Warn("remove stale image volume snapshot")
			}
		}
	}
}

// idMappedOverlays adds the user namespace's mappings to overlay mounts as
// containerd's mount package reads them ("uidmap=0:100000:65536"): it maps each layer
// before mounting the overlay, which cannot be id-mapped itself.
func idMappedOverlays(mounts []mount.Mount, u *runtimeapi.UserNamespace) []mount.Mount {
	out := make([]mount.Mount, len(mounts))
	for i, m := range mounts {
		if m.Type == "overlay" {
			m.Options = append(slices.Clone(m.Options), "uidmap="+idMapList(u.GetUids()), "gidmap="+idMapList(u.GetGids()))
		}
		out[i] = m
	}
	return out
}

// idMapTree replaces the mount at target with an id-mapped clone of itself.
func idMapTree(target string, u *runtimeapi.UserNamespace) error {
	userns, err := mount.GetUsernsFD(idMapList(u.GetUids()), idMapList(u.GetGids()))
	if err != nil {
		return err
	}
	defer userns.Close()
	return mount.IDMapMount(target, target, int(userns.Fd()))
}

func idMapList(ids []*runtimeapi.IDMapping) string {
	var parts []string
	for _, m := range ids {
		parts = append(parts, fmt.Sprintf("%d:%d:%d", m.GetContainerId(), m.GetHostId(), m.GetLength()))
	}
	return strings.Join(parts, ",")
}

// sameMappings: none given, or the same as the pod's.
func sameMappings(given, pod []*runtimeapi.IDMapping) bool {
	return len(given) == 0 || slices.EqualFunc(given, pod, func(a, b *runtimeapi.IDMapping) bool {
		return a.GetContainerId() == b.GetContainerId() && a.GetHostId() == b.GetHostId() && a.GetLength() == b.GetLength()
	})
}
