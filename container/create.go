package container

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/containerd/nri/pkg/api"
	"github.com/opencontainers/image-spec/identity"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/ctrd"
	"github.com/shimd/shimd/image"
	"github.com/shimd/shimd/pod"
)

// CreateContainer creates a container in a READY pod.
//
//  1. the sandbox must be READY (else FailedPrecondition); the CDI devices asked
//     for must resolve (else InvalidArgument), the mounts' host paths exist (made
//     as directories if missing, or NotFound, create_checks.go); reserve the name
//  2. resolve the image locally (never pull; absent -> NotFound)
//  3. prepare the writable layer; resolve the user in it
//  4. build the OCI spec (a pure function, package spec); inject CDI devices (cdi.go);
//     NRI plugins adjust it (nri.go); the working directory and masked paths must
//     not cross a file (create_checks.go)
//  5. containerd container with the record; status CREATED
func (s *Manager) Create(ctx context.Context, req *runtimeapi.CreateContainerRequest) (*runtimeapi.CreateContainerResponse, error) {
	return s.create(ctx, req, "")
}

// create is CreateContainer; with fromDir, of a container to be restored from the
// container checkpoint there (CreateFromCheckpoint).
func (s *Manager) create(ctx context.Context, req *runtimeapi.CreateContainerRequest, fromDir string) (_ *runtimeapi.CreateContainerResponse, retErr error) {
	cfg := req.GetConfig()
	sb, err := s.opts.Pods.Pod(req.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	if err := s.cdi.check(cfg); err != nil {
		return nil, err
	}
	if sb.State != pod.Ready {
		return nil, fmt.Errorf("sandbox %s is not ready: %w", sb.ID, errdefs.ErrFailedPrecondition)
	}
	if err := checkHostPaths(cfg, s.opts.RejectAbsentMountSources); err != nil {
		return nil, err
	}
	name := sb.ID + "_" + cfg.GetMetadata().GetName() + "_" + fmt.Sprint(cfg.GetMetadata().GetAttempt())
	if c, err := s.reserveName(ctx, name, cfg); err != nil {
		return nil, err
	} else if c != nil {
		return &runtimeapi.CreateContainerResponse{ContainerId: c.ID}, nil
	}
	defer func() {
		if retErr != nil {
			s.containers.release(name)
		}
	}()
	rt, err := s.opts.Handlers.Get(sb.RuntimeHandler)
	if err != nil {
		return nil, err
	}
	img, imageName, restore, err := s.ckpt.createImage(ctx, sb, rt, cfg.GetImage().GetImage(), fromDir)
	if err != nil {
		return nil, err
	}
	defer restore.close()
	logPath, err := containerLogPath(sb.Config.GetLogDirectory(), cfg.GetLogPath())
	if err != nil {
		return nil, err
	}
	stopSig, err := stopSignal(cfg, img.Config.Config.StopSignal)
	if err != nil {
		return nil, invalid("config.stop_signal", "%v", err)
	}
	id := newContainerID()
	c := &Container{
		ID: id, statusDir: s.dirs.containerDir(id), Name: name, SandboxID: sb.ID, Config: cfg, ImageID: img.ID,
		ImageName: imageName, ImageRef: imageRef(img), LogPath: logPath,
		CreatedAt: time.Now(), Snapshotter: rt.Snapshotter, StopSignal: stopSig,
		exited: make(chan struct{}), restore: restore,
	}
	ctx = log.WithLogger(ctx, log.G(ctx).WithField("container", c.ID).WithField("sandbox", sb.ID))
	cctx, cancel := s.detachedContext(ctx)
	defer cancel()
	st := newSteps()
	// NRI plugins' synchronization waits until the container is listed or gone, so
	// a plugin that connects meanwhile learns of it one way or the other.
	unblock := s.nri.blockSync()
	if err := s.createContainer(cctx, &draft{c: c, sb: sb, img: img, rt: rt, st: st}); err != nil {
		// Plugins that saw it created hear it is gone.
		s.nri.containerEvent(cctx, api.Event_REMOVE_CONTAINER, c)
		unblock()
		return nil, err
	}
	s.containers.add(c)
	unblock()
	log.G(ctx).WithField("steps", st).Info("container created")
	s.events.Emit(c.ID, c.SandboxID, runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT)
	s.nri.containerEvent(cctx, api.Event_POST_CREATE_CONTAINER, c)
	return &runtimeapi.CreateContainerResponse{ContainerId: c.ID}, nil
}

// reserveName reserves name for a new container. A CreateContainer of the same name
// is the kubelet's retry of one it gave up on: while that one still runs (its work is
// detached from its caller), the retry waits for it, then gets the container it made
// or, if it failed, tries afresh; one that finished after the kubelet gave up (or
// before shimd restarted) hands back its container. A container of that name with
// another config, or no longer CREATED, is AlreadyExists.
func (s *Manager) reserveName(ctx context.Context, name string, cfg *runtimeapi.ContainerConfig) (*Container, error) {
	for {
		busy, err := s.containers.reserve(name)
		if err == nil {
			return nil, nil
		}
		if busy == nil {
			if c := s.containers.retried(name, cfg); c != nil {
				return c, nil
			}
			return nil, err
		}
		select {
		case <-busy:
		case <-ctx.Done():
			return nil, fmt.Errorf("wait for the CreateContainer of %q still at work: %w", name, ctx.Err())
		}
	}
}

// draft is a container on its way to CREATED: what create gathered for it, and what
// createContainer's steps add.
type draft struct {
	c   *Container
	sb  pod.Pod
	img *image.Image
	rt  pod.Handler
	st  *steps
	// parent is the chain id of the image's layers: the writable layer's parent.
	parent string
	// prepare makes the writable layer (writableLayers.make); prepared tells that it
	// was made before the records, and mounts are its mounts once made.
	prepare  func(context.Context) ([]mount.Mount, error)
	prepared bool
	mounts   []mount.Mount
}

// createContainer makes d's container, undoing what it made if it fails:
//
//  1. the writable layer is set up (made now, or after the records when nothing
//     needs it before)
//  2. the user comes from the image's user database
//  3. the OCI spec, with the pod's volumes, checked against the image's tree
//  4. containerd's container record and the sandbox store's record
//  5. the writable layer if not made yet; the status file says CREATED
func (s *Manager) createContainer(ctx context.Context, d *draft) (retErr error) {
	d.parent = identity.ChainID(d.img.Config.RootFS.DiffIDs).String()
	undoLayer, err := s.layers.make(ctx, d)
	if err != nil {
		return err
	}
	defer func() {
		if retErr != nil {
			undoLayer()
		}
	}()
	ctx, endLease, err := s.resolveUser(ctx, d)
	defer endLease()
	if err != nil {
		return err
	}
	ociSpec, err := s.draftSpec(ctx, d)
	if err != nil {
		return err
	}
	if d.c.restore != nil {
		defer func() {
			if retErr != nil {
				os.RemoveAll(s.dirs.containerDir(d.c.ID))
			}
		}()
	}
	if err := s.writeRecords(ctx, d, ociSpec); err != nil {
		return err
	}
	c := d.c
	if !d.prepared {
		// The record names the layer before it exists: containerd's garbage collector
		// keeps it from its creation on, without a lease.
		if d.mounts, err = d.prepare(ctx); err != nil {
			s.deleter.undoRecords(ctx, c, true, true)
			return err
		}
		d.st.done("snapshot")
	}
	c.setRootfs(d.mounts)
	if err := c.Update(func(st *containerStatus) error { st.State = runtimeapi.ContainerState_CONTAINER_CREATED; return nil }); err != nil {
		cctx, cancel := s.detachedContext(ctx)
		defer cancel()
		if derr := s.deleter.delete(cctx, c); derr != nil {
			log.G(ctx).WithError(derr).Warn("undo containerd container; will retry")
			s.deleter.later(c)
		}
		return fmt.Errorf("write container status: %w", err)
	}
	d.st.done("status")
	return nil
}

// writeRecords writes containerd's container record for d and, beside it, the
// container's record in the sandbox store (exit_keep.go); if either fails, neither
// is left.
func (s *Manager) writeRecords(ctx context.Context, d *draft, ociSpec *specs.Spec) error {
	c := d.c
	opts := []client.NewContainerOpts{
		ctrd.WithSnapshotKey(d.rt.Snapshotter, c.ID),
		client.WithImageName(d.img.Records[0]),
		client.WithRuntime(d.rt.Type, d.rt.Options),
		client.WithSpec(ociSpec),
		withContainerRecord(c, d.img.Target.Digest.String()),
	}
	if d.sb.InStore {
		// containerd loads the task into the pod's running shim (sandbox_store.go).
		opts = append(opts, client.WithSandbox(d.sb.ID))
	}
	kept := make(chan error, 1)
	go func() { kept <- s.keeper.keep(ctx, c.ID, c.SandboxID) }()
	createErr := ctrd.CreateContainer(ctx, s.ctrd.ContainerService(), c.ID, opts...)
	if keepErr := <-kept; createErr != nil || keepErr != nil {
		s.deleter.undoRecords(ctx, c, createErr == nil, keepErr == nil)
		if createErr != nil {
			return fmt.Errorf("create containerd container: %w", createErr)
		}
		return keepErr
	}
	d.st.done("container")
	return nil
}

// ensureUnpacked unpacks the image for the snapshotter if its layers are not there.
func ensureUnpacked(ctx context.Context, api containerdAPI, img *image.Image, snapshotter, chainID string) error {
	if _, err := api.SnapshotService(snapshotter).Stat(ctx, chainID); err == nil {
		return nil
	}
	ci, err := api.GetImage(ctx, img.Records[0])
	if err != nil {
		return fmt.Errorf("image %s: %w", img.ID, err)
	}
	if err := ci.Unpack(ctx, snapshotter); err != nil {
		if errdefs.IsNotFound(err) {
			// shimd keeps pulled layers only unpacked (see image.streamUnpacker).
			return fmt.Errorf("image %s is not unpacked for snapshotter %s and its layers are not stored: "+
				"pull it with this runtime handler: %w", img.ID, snapshotter, errdefs.ErrFailedPrecondition)
		}
		return fmt.Errorf("unpack image %s for %s: %w", img.ID, snapshotter, err)
	}
	return nil
}

// containerLogPath joins the pod's log directory and the container's log path,
// refusing a path that escapes the directory.
func containerLogPath(dir, rel string) (string, error) {
	if rel == "" {
		return "", nil
	}
	if dir == "" {
		return "", invalid("config.log_path", "set, but the pod has no log_directory")
	}
	if filepath.IsAbs(rel) {
		return "", invalid("config.log_path", "%q must be relative to the pod's log directory", rel)
	}
	p := filepath.Join(dir, rel)
	if !strings.HasPrefix(p, filepath.Clean(dir)+string(filepath.Separator)) {
		return "", invalid("config.log_path", "%q escapes the pod's log directory", rel)
	}
	return p, nil
}

// imageRef is what the kubelet shows as the image: a repo digest, else the id.
func imageRef(img *image.Image) string {
	if len(img.RepoDigests) > 0 {
		return img.RepoDigests[0]
	}
	return img.ID
}

func handlerName(h, def string) string {
	if h == "" {
		return def
	}
	return h
}

func newContainerID() string { return pod.NewID() }

// snapshotOpts are the options of a writable layer in the pod: with the pod's own
// user namespace its files are remapped to the pod's host ids.
func snapshotOpts(p pod.Pod) []snapshots.Opt {
	u := p.UserNamespace()
	if u == nil {
		return nil
	}
	um, gm := u.GetUids()[0], u.GetGids()[0]
	return []snapshots.Opt{client.WithRemapperLabels(0, um.GetHostId(), 0, gm.GetHostId(), um.GetLength())}
}
