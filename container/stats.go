package container

import (
	"fmt"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/containerd/errdefs"

	"github.com/shimd/shimd/stats"
)

// StatsOf lists the containers of a pod ("" for all) as package stats samples them.
func (s *Manager) StatsOf(podID string) []stats.Container {
	var cs []*Container
	if podID == "" {
		cs = s.containers.list()
	} else {
		cs = s.containers.inSandbox(podID)
	}
	out := make([]stats.Container, 0, len(cs))
	kernel := map[string]bool{} // by pod: its handler's cgroups are the kernel's
	for _, c := range cs {
		st := c.Status()
		k, seen := kernel[c.SandboxID]
		if !seen {
			if p, err := s.opts.Pods.Pod(c.SandboxID); err == nil {
				k = s.opts.Handlers.KernelCgroups(p.RuntimeHandler)
			}
			kernel[c.SandboxID] = k
		}
		out = append(out, stats.Container{
			KernelCgroups: k,
			ID:            c.ID, SandboxID: c.SandboxID, Metadata: c.Config.GetMetadata(),
			Labels: c.Config.GetLabels(), Annotations: c.Config.GetAnnotations(),
			ImageName: c.ImageName, Snapshotter: c.Snapshotter,
			WritableUpper: c.WritableUpper(), WritableFs: c.writableFs(),
			Running: st.State == runtimeapi.ContainerState_CONTAINER_RUNNING,
			Pid:     st.Pid, StartedAt: st.StartedAt, Resources: c.Resources(),
		})
	}
	return out
}

// StatsFor is StatsOf for one container, found by id or unique prefix.
func (s *Manager) StatsFor(id string) (stats.Container, error) {
	c, err := s.containers.get(id)
	if err != nil {
		return stats.Container{}, err
	}
	for _, sc := range s.StatsOf(c.SandboxID) {
		if sc.ID == c.ID {
			return sc, nil
		}
	}
	return stats.Container{}, fmt.Errorf("container %s: %w", id, errdefs.ErrNotFound)
}
