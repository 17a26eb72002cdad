package runtime

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/containerd/log"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/container"
)

// CheckpointPod writes one consistent checkpoint of the listed running containers
// of a pod into an existing empty directory (container.Manager.CheckpointPod).
func (s *Service) CheckpointPod(ctx context.Context, req *runtimeapi.CheckpointPodRequest) (*runtimeapi.CheckpointPodResponse, error) {
	if err := validateID("pod_sandbox_id", req.GetPodSandboxId()); err != nil {
		return nil, err
	}
	if err := validateCheckpointDir("output_path", req.GetOutputPath(), true); err != nil {
		return nil, err
	}
	if len(req.GetContainerIds()) == 0 {
		return nil, invalid("container_ids", "is empty: name the running containers to checkpoint")
	}
	for i, id := range req.GetContainerIds() {
		if err := validateID(fmt.Sprintf("container_ids[%d]", i), id); err != nil {
			return nil, err
		}
		if slices.Index(req.GetContainerIds(), id) != i {
			return nil, invalid(fmt.Sprintf("container_ids[%d]", i), "%s is listed twice", quote(id))
		}
	}
	if err := noOptions(req.GetOptions()); err != nil {
		return nil, err
	}
	if err := s.opts.Containers.Checkpoints().CheckpointPod(ctx, req.GetPodSandboxId(), req.GetOutputPath(), req.GetContainerIds()); err != nil {
		return nil, err
	}
	return &runtimeapi.CheckpointPodResponse{}, nil
}

// RestorePod runs a new pod sandbox of the request's config and creates in it, from
// a CheckpointPod directory, one container per container config, matched by
// metadata name; they are CREATED and their processes are restored by their
// StartContainer. On failure the pod and its containers are removed again.
func (s *Service) RestorePod(ctx context.Context, req *runtimeapi.RestorePodRequest) (_ *runtimeapi.RestorePodResponse, retErr error) {
	dir := req.GetCheckpointPath()
	if err := validateCheckpointDir("checkpoint_path", dir, false); err != nil {
		return nil, err
	}
	if err := validateSandboxConfig(req.GetConfig()); err != nil {
		return nil, err
	}
	if err := validateCgroupParent(req.GetConfig().GetLinux().GetCgroupParent(), s.opts.CgroupDriver); err != nil {
		return nil, err
	}
	if err := noOptions(req.GetOptions()); err != nil {
		return nil, err
	}
	cfgs := req.GetContainerConfigs()
	if len(cfgs) == 0 {
		return nil, invalid("container_configs", "is empty: give the config of every container of the checkpoint")
	}
	for i, cfg := range cfgs {
		if err := validateContainerConfig(cfg, s.opts.Node); err != nil {
			return nil, fmt.Errorf("container_configs[%d]: %w", i, err)
		}
	}
	meta, err := container.ReadPodCheckpoint(dir)
	if err != nil {
		return nil, err
	}
	dirOf, err := checkpointDirs(cfgs, meta, dir)
	if err != nil {
		return nil, err
	}

	run, err := s.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: req.GetConfig(), RuntimeHandler: req.GetRuntimeHandler()})
	if err != nil {
		return nil, err
	}
	podID := run.GetPodSandboxId()
	defer func() {
		if retErr == nil {
			return
		}
		cctx, cancel := s.detachedContext(ctx)
		defer cancel()
		if _, err := s.StopPodSandbox(cctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: podID}); err != nil {
			log.G(ctx).WithError(err).WithField("sandbox", podID).Warn("undo RestorePod: stop")
		} else if _, err := s.RemovePodSandbox(cctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: podID}); err != nil {
			log.G(ctx).WithError(err).WithField("sandbox", podID).Warn("undo RestorePod: remove")
		}
	}()
	resp := &runtimeapi.RestorePodResponse{PodSandboxId: podID}
	for _, cfg := range cfgs {
		name := cfg.GetMetadata().GetName()
		created, err := s.opts.Containers.Checkpoints().CreateFromCheckpoint(ctx, &runtimeapi.CreateContainerRequest{
			PodSandboxId: podID, Config: cfg, SandboxConfig: req.GetConfig()}, dirOf[name])
		if err != nil {
			return nil, fmt.Errorf("restore container %s: %w", name, err)
		}
		resp.RestoredContainers = append(resp.RestoredContainers, &runtimeapi.RestoredContainer{Name: name, ContainerId: created.GetContainerId()})
	}
	return resp, nil
}

// checkpointDirs matches the request's container configs with the checkpoint's
// containers by metadata name, one config for each, and returns each container's
// directory in the checkpoint dir by name.
func checkpointDirs(cfgs []*runtimeapi.ContainerConfig, meta *container.PodCheckpoint, dir string) (map[string]string, error) {
	dirOf := map[string]string{}
	for _, c := range meta.Containers {
		dirOf[c.Name] = filepath.Join(dir, c.Dir)
	}
	seen := map[string]bool{}
	for i, cfg := range cfgs {
		name := cfg.GetMetadata().GetName()
		if seen[name] {
			return nil, invalid(fmt.Sprintf("container_configs[%d].metadata.name", i), "%s is given twice", quote(name))
		}
		seen[name] = true
		if dirOf[name] == "" {
			return nil, invalid(fmt.Sprintf("container_configs[%d].metadata.name", i), "the checkpoint has no container %s", quote(name))
		}
	}
	if len(seen) != len(dirOf) {
		var missing []string
		for name := range dirOf {
			if !seen[name] {
				missing = append(missing, name)
			}
		}
		slices.Sort(missing)
		return nil, invalid("container_configs", "no config for the checkpoint's containers %s", strings.Join(missing, ", "))
	}
	return dirOf, nil
}

// validateCheckpointDir accepts an absolute, clean path of an existing directory,
// empty if empty is set.
func validateCheckpointDir(field, dir string, empty bool) error {
	if err := validateAbsPath(field, dir); err != nil {
		return err
	}
	fi, err := os.Lstat(dir)
	if err != nil || !fi.IsDir() {
		return invalid(field, "%s is not an existing directory", quote(dir))
	}
	if empty {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return invalid(field, "%s cannot be read: %v", quote(dir), err)
		}
		if len(entries) > 0 {
			return invalid(field, "%s is not empty", quote(dir))
		}
	}
	return nil
}

// noOptions refuses runtime-specific checkpoint and restore options: shimd has none.
func noOptions(opts map[string]string) error {
	for k := range opts {
		return invalid("options", "%s: shimd has no checkpoint or restore options", quote(k))
	}
	return nil
}
