package container

import (
	"context"
	"fmt"
	"sync"

	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/image"
	"github.com/shimd/shimd/pod"
	"github.com/shimd/shimd/spec"
)

// Steps 2 and 3 of createContainer: the user resolved in the image's /etc/passwd and
// /etc/group (cached by chain id), then the OCI spec: the inputs of the pure builder
// (package spec) gathered from the pod, the image and the node, the pod's volumes,
// the CDI devices and the NRI plugins' adjustments.

// resolveUser sets d.c.User from the image's /etc/passwd and /etc/group, read from
// the writable layer of the image's first container and kept by chain id. The layer
// is made here (d.prepared) when the user database is not kept yet, when paths of
// the request are to be checked in it, or for a restore; it has to exist before the
// record that names it, so a lease, which the returned context holds and end ends,
// keeps it from containerd's garbage collector until then.
func (s *Manager) resolveUser(ctx context.Context, d *draft) (_ context.Context, end func(), err error) {
	end = func() {}
	db := s.userDBs.get(d.parent)
	d.prepared = db == nil || s.treesOK.mayNeedRootfs(d.parent, d.c.Config, d.img.Config.Config.WorkingDir) || d.c.restore != nil
	if d.prepared {
		lctx, done, err := image.WithLease(ctx, s.ctrd, "container")
		if err != nil {
			return ctx, end, fmt.Errorf("lease: %w", err)
		}
		ctx, end = lctx, func() { _ = done(context.WithoutCancel(lctx)) }
		if d.mounts, err = d.prepare(ctx); err != nil {
			return ctx, end, err
		}
		if db == nil {
			if err := mount.WithReadonlyTempMount(ctx, d.mounts, func(root string) error {
				db, err = spec.ReadUserDB(root)
				return err
			}); err != nil {
				return ctx, end, fmt.Errorf("resolve user: %w", err)
			}
			s.userDBs.put(d.parent, db)
			d.st.done("snapshot+passwd")
		} else {
			d.st.done("snapshot")
		}
	}
	user, err := db.Resolve(d.c.Config.GetLinux().GetSecurityContext(), d.img.Config.Config.User)
	if err != nil {
		return ctx, end, fmt.Errorf("resolve user: %w", err)
	}
	d.c.User = user
	d.st.done("user")
	return ctx, end, nil
}

// draftSpec mounts the pod's image volumes, builds the container's OCI spec and
// checks its paths against the image's tree; for a restore, it checks the
// checkpoint's process against the spec and lays the checkpoint out (the caller
// removes the container's directory if a later step fails).
func (s *Manager) draftSpec(ctx context.Context, d *draft) (*specs.Spec, error) {
	c := d.c
	withVolumes, err := s.volumes.mount(ctx, c, d.sb, d.rt.Snapshotter)
	if err != nil {
		return nil, err
	}
	c.Config = withVolumes
	ociSpec, err := s.containerSpec(ctx, d)
	if err != nil {
		return nil, err
	}
	if err := s.treesOK.checkTreePaths(ctx, d.parent, c.Config, d.img.Config.Config.WorkingDir, ociSpec, d.mounts); err != nil {
		return nil, err
	}
	if c.restore != nil {
		if err := c.restore.checkProcess(ociSpec); err != nil {
			return nil, err
		}
		if err := s.ckpt.applyCheckpoint(ctx, c, d.mounts); err != nil {
			return nil, err
		}
		d.st.done("checkpoint")
	}
	d.st.done("volumes+spec")
	return ociSpec, nil
}

// userDBCache keeps the user databases of images by chain id (see spec.UserDB), at
// most userDBCacheSize of them and userDBCacheBytes together: a node's images, as a
// rule, and never what crafted images' user files would make of it.
type userDBCache struct {
	mu    sync.Mutex
	dbs   map[string]*spec.UserDB
	bytes int
}

const (
	userDBCacheSize  = 256
	userDBCacheBytes = 32 << 20
)

func (u *userDBCache) get(chainID string) *spec.UserDB {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.dbs[chainID]
}

func (u *userDBCache) put(chainID string, db *spec.UserDB) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.dbs == nil || len(u.dbs) >= userDBCacheSize || u.bytes+db.Bytes() > userDBCacheBytes {
		u.dbs, u.bytes = map[string]*spec.UserDB{}, 0 // start again: reading one costs a mount
	}
	if db.Bytes() > userDBCacheBytes {
		return
	}
	u.dbs[chainID] = db
	u.bytes += db.Bytes()
}

// containerSpec gathers the inputs of the pure spec builder.
func (s *Manager) containerSpec(ctx context.Context, d *draft) (*specs.Spec, error) {
	c, sb, img, user := d.c, d.sb, d.img, d.c.User
	files := sb.Files
	in := spec.Input{
		ID: c.ID, Namespace: s.opts.Namespace, SandboxID: sb.ID, Config: c.Config, SandboxConfig: sb.Config,
		Image: img.Config.Config, ImageName: c.ImageName, User: user,
		SandboxPID: sb.PID, NetNSPath: sb.NetNSPath, Pauseless: sb.Pauseless, IPCNSPath: sb.IPCNSPath, UTSNSPath: sb.UTSNSPath,
		HostnamePath: files.Hostname, HostsPath: files.Hosts, ResolvConfPath: files.ResolvConf, ShmPath: files.Shm,
		CgroupDriver: s.opts.CgroupDriver, MinOOMScoreAdj: s.opts.MinOOMScoreAdj,
		CgroupsPath: pod.CgroupPath(sb.Config.GetLinux().GetCgroupParent(), c.ID, s.opts.CgroupDriver),
	}
	hf := s.opts.Node.Handlers[handlerName(sb.RuntimeHandler, s.opts.Handlers.Default)]
	in.RecursiveReadOnlyMounts, in.MountOptions = hf.RecursiveReadOnlyMounts, hf.MountOptions
	if ns := c.Config.GetLinux().GetSecurityContext().GetNamespaceOptions(); ns.GetPid() == runtimeapi.NamespaceMode_TARGET {
		target, err := s.containers.get(ns.GetTargetId())
		if err != nil {
			return nil, fmt.Errorf("target container of the pid namespace: %w", err)
		}
		if in.TargetPID = target.Status().Pid; in.TargetPID == 0 || target.Status().State != runtimeapi.ContainerState_CONTAINER_RUNNING {
			return nil, fmt.Errorf("target container %s is not running: %w", target.ID, errdefs.ErrFailedPrecondition)
		}
	}
	if in.SandboxPID == 0 && !sb.Pauseless && sb.State == pod.Ready {
		in.SandboxPID = s.opts.Pods.PausePID(ctx, sb.ID)
	}
	if in.SandboxPID == 0 && !sb.Pauseless {
		return nil, fmt.Errorf("sandbox %s has no running pause process: %w", sb.ID, errdefs.ErrFailedPrecondition)
	}
	if err := s.loadSpecFiles(ctx, c, &in); err != nil {
		return nil, err
	}
	if err := s.confine.selinuxSpecInput(c, sb, &in); err != nil {
		return nil, err
	}
	ociSpec, err := spec.Container(in)
	if err != nil {
		return nil, fmt.Errorf("container spec: %w", err)
	}
	if err := s.confine.relabelMounts(c, in.SELinuxMountLabel); err != nil {
		return nil, err
	}
	if err := s.cdi.inject(ociSpec, c.Config); err != nil {
		return nil, err
	}
	if err := s.nri.adjust(ctx, c, sb, ociSpec); err != nil {
		return nil, err
	}
	return ociSpec, nil
}
