package sandbox

import (
	"context"
	"fmt"

	"github.com/containerd/errdefs"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// UpdateResources records the pod-level overhead and resources of
// UpdatePodSandboxResources in the sandbox record, so that they are reported and
// survive a restart. It changes no cgroup: the kubelet owns the pod's cgroup and has
// resized it before the call (shimd has no NRI plugins to tell, the only other use
// containerd's and CRI-O's plugins make of it).
func (m *Manager) UpdateResources(ctx context.Context, id string, overhead, resources *runtimeapi.LinuxContainerResources) error {
	sb, err := m.store.get(id)
	if err != nil {
		return err
	}
	sb.mu.Lock()
	sb.overhead, sb.resources = overhead, resources
	sb.mu.Unlock()
	if err := m.updateRecord(ctx, sb, PhaseCreated); err != nil {
		// A sandbox removed meanwhile is asked about directly, to answer NotFound
		// whatever class the update's error has.
		if _, gerr := m.opts.Client.ContainerService().Get(ctx, sb.ID); errdefs.IsNotFound(gerr) {
			return fmt.Errorf("sandbox %s was removed: %v: %w", sb.ID, err, errdefs.ErrNotFound)
		}
		return fmt.Errorf("record resources of sandbox %s: %w", sb.ID, err)
	}
	return nil
}
