package container

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	metadata "github.com/checkpoint-restore/checkpointctl/lib"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"google.golang.org/protobuf/encoding/protojson"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/pod"
)

// A pod checkpoint (CheckpointPod) is a directory the caller gives:
//
//	pod.options            PodCheckpoint (JSON): format, runtime handler, containers
//	pod.dump               the pod's PodSandboxConfig (protobuf JSON)
//	containers/N/          container N's checkpoint, the files of a container archive
//	                       (checkpoint.go) unpacked, and container.config, its
//	                       ContainerConfig (protobuf JSON)
//
// RestorePod reads it without changing it.
const (
	podCheckpointFormat     = "shimd.pod-checkpoint.v1"
	podContainersDir        = "containers"
	containerConfigDumpFile = "container.config"
)

// PodCheckpoint is pod.options.
type PodCheckpoint struct {
	Format         string                   `json:"format"`
	RuntimeHandler string                   `json:"runtimeHandler"`
	CheckpointedAt time.Time                `json:"checkpointedAt"`
	Containers     []PodCheckpointContainer `json:"containers"`
}

// PodCheckpointContainer is one container of a pod checkpoint.
type PodCheckpointContainer struct {
	Name string `json:"name"` // metadata name
	ID   string `json:"id"`   // the checkpointed container's id
	Dir  string `json:"dir"`  // relative to the checkpoint: containers/N
}

// CheckpointPod writes a checkpoint of the listed running containers of a READY pod
// into dir, an existing empty directory. Every container is paused before the
// first is dumped and all stay paused until the last one's writable layer has been
// read, so the checkpoint is one cut of the pod; all are resumed before it returns,
// on success and on failure. The caller's deadline is checked between containers:
// a dump in progress is not cut short (see Checkpoint), so an expired deadline
// returns once that dump has ended and the pod is resumed. On failure nothing is
// left in dir.
func (k *Checkpoints) CheckpointPod(ctx context.Context, podID, dir string, ids []string) (retErr error) {
	sb, err := k.m.opts.Pods.Pod(podID)
	if err != nil {
		return err
	}
	if sb.State != pod.Ready {
		return fmt.Errorf("pod %s is not ready: %w", podID, errdefs.ErrFailedPrecondition)
	}
	cs, err := k.podContainers(podID, ids)
	if err != nil {
		return err
	}
	if err := k.criu.check(ctx); err != nil {
		return err
	}
	unlock, err := lockForCheckpoint(cs)
	if err != nil {
		return err
	}
	defer unlock()
	ctx = log.WithLogger(ctx, log.G(ctx).WithField("sandbox", podID))
	start := time.Now()
	defer func() {
		if retErr != nil {
			os.RemoveAll(filepath.Join(dir, podContainersDir))
			os.Remove(filepath.Join(dir, metadata.PodOptionsFile))
			os.Remove(filepath.Join(dir, metadata.PodDumpFile))
		}
	}()
	// The work goes on to its end under its own context; the caller's is looked at
	// between steps.
	caller := ctx
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), maxCheckpointTime)
	defer cancel()

	var paused []*Container
	defer func() {
		for _, c := range paused {
			if err := k.resumeTask(ctx, c); err != nil && retErr == nil {
				retErr = err
			}
		}
	}()
	for _, c := range cs {
		if err := k.pauseTask(ctx, c); err != nil {
			return err
		}
		paused = append(paused, c)
	}
	meta := PodCheckpoint{Format: podCheckpointFormat, RuntimeHandler: sb.RuntimeHandler, CheckpointedAt: time.Now()}
	for i, c := range cs {
		if err := caller.Err(); err != nil {
			return fmt.Errorf("pod checkpoint of %s: %w (%d of %d containers dumped; the pod runs on)", podID, err, i, len(cs))
		}
		entry, err := k.dumpPodContainer(ctx, c, dir, i)
		if err != nil {
			return err
		}
		meta.Containers = append(meta.Containers, entry)
	}
	if err := writePodFiles(dir, sb.Config, meta); err != nil {
		return err
	}
	if err := caller.Err(); err != nil {
		return fmt.Errorf("pod checkpoint of %s: %w (the pod runs on)", podID, err)
	}
	log.G(ctx).WithField("dir", dir).WithField("containers", len(cs)).WithField("took", time.Since(start).Round(time.Millisecond)).Info("pod checkpointed")
	return nil
}

// podContainers finds the containers ids names: running containers of the pod, no
// two of one name.
func (k *Checkpoints) podContainers(podID string, ids []string) ([]*Container, error) {
	var cs []*Container
	names := map[string]bool{}
	for i, id := range ids {
		c, err := k.m.containers.get(id)
		if err != nil {
			return nil, err
		}
		if c.SandboxID != podID {
			return nil, fmt.Errorf("container_ids[%d]: container %s is not in pod %s: %w", i, id, podID, errdefs.ErrInvalidArgument)
		}
		if st := c.Status(); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
			return nil, fmt.Errorf("container %s (%s) is %s: a pod checkpoint takes running containers: %w",
				id, c.Config.GetMetadata().GetName(), st.State, errdefs.ErrFailedPrecondition)
		}
		name := c.Config.GetMetadata().GetName()
		if names[name] {
			return nil, fmt.Errorf("container_ids[%d]: two containers named %q: %w", i, name, errdefs.ErrInvalidArgument)
		}
		names[name] = true
		cs = append(cs, c)
	}
	return cs, nil
}

// lockForCheckpoint marks every container of cs as being checkpointed, or none if
// one already is (FailedPrecondition); unlock clears the marks.
func lockForCheckpoint(cs []*Container) (unlock func(), _ error) {
	for i, c := range cs {
		if !c.checkpointing.CompareAndSwap(false, true) {
			for _, d := range cs[:i] {
				d.checkpointing.Store(false)
			}
			return nil, fmt.Errorf("a checkpoint of container %s is in progress: %w", c.ID, errdefs.ErrFailedPrecondition)
		}
	}
	return func() {
		for _, c := range cs {
			c.checkpointing.Store(false)
		}
	}, nil
}

// dumpPodContainer writes the checkpoint of paused container c, the i-th of the pod
// checkpoint in dir, with its config, into containers/i.
func (k *Checkpoints) dumpPodContainer(ctx context.Context, c *Container, dir string, i int) (PodCheckpointContainer, error) {
	rel := filepath.Join(podContainersDir, strconv.Itoa(i))
	work := filepath.Join(dir, rel)
	if err := os.MkdirAll(work, 0o700); err != nil {
		return PodCheckpointContainer{}, err
	}
	if err := k.dumpPaused(ctx, c, work); err != nil {
		return PodCheckpointContainer{}, err
	}
	if err := k.writeCheckpointFiles(ctx, c, work); err != nil {
		return PodCheckpointContainer{}, err
	}
	cfg, err := protojson.Marshal(c.Config)
	if err != nil {
		return PodCheckpointContainer{}, err
	}
	if err := os.WriteFile(filepath.Join(work, containerConfigDumpFile), cfg, 0o600); err != nil {
		return PodCheckpointContainer{}, err
	}
	return PodCheckpointContainer{Name: c.Config.GetMetadata().GetName(), ID: c.ID, Dir: rel}, nil
}

// writePodFiles writes pod.dump (the pod's config) and pod.options (meta) into dir.
func writePodFiles(dir string, cfg *runtimeapi.PodSandboxConfig, meta PodCheckpoint) error {
	podCfg, err := protojson.Marshal(cfg)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, metadata.PodDumpFile), podCfg, 0o600); err != nil {
		return err
	}
	data, err := json.Marshal(meta)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, metadata.PodOptionsFile), data, 0o600)
}

// ReadPodCheckpoint reads pod.options of a pod checkpoint directory.
func ReadPodCheckpoint(dir string) (*PodCheckpoint, error) {
	data, err := os.ReadFile(filepath.Join(dir, metadata.PodOptionsFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("checkpoint_path: %s is not a pod checkpoint: it has no %s: %w", dir, metadata.PodOptionsFile, errdefs.ErrInvalidArgument)
	} else if err != nil {
		return nil, fmt.Errorf("checkpoint_path: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	var m PodCheckpoint
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("checkpoint_path: %s of %s: %v: %w", metadata.PodOptionsFile, dir, err, errdefs.ErrInvalidArgument)
	}
	if m.Format != podCheckpointFormat {
		return nil, fmt.Errorf("checkpoint_path: %s is a pod checkpoint of format %q, not %q: %w", dir, m.Format, podCheckpointFormat, errdefs.ErrInvalidArgument)
	}
	for _, c := range m.Containers {
		if !filepath.IsLocal(c.Dir) {
			return nil, fmt.Errorf("checkpoint_path: %s names container directory %q outside it: %w", dir, c.Dir, errdefs.ErrInvalidArgument)
		}
	}
	return &m, nil
}

// CreateFromCheckpoint creates, in a READY pod, a container to be restored from
// the container checkpoint in dir (a directory of a pod checkpoint), which is copied
// and not changed. cfg's image must be the checkpointed container's image.
func (k *Checkpoints) CreateFromCheckpoint(ctx context.Context, req *runtimeapi.CreateContainerRequest, dir string) (*runtimeapi.CreateContainerResponse, error) {
	return k.m.create(ctx, req, dir)
}
