package container

import (
	"context"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/pod"
)

// ListContainers lists containers matching the filter (id or unique prefix, state,
// pod sandbox id, label selector).
func (s *Manager) List(_ context.Context, req *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	f := req.GetFilter()
	resp := &runtimeapi.ListContainersResponse{}
	for _, c := range s.containers.list() {
		st := c.Status()
		if containerMatches(c, st, f) {
			resp.Containers = append(resp.Containers, toContainer(c, st))
		}
	}
	return resp, nil
}

func containerMatches(c *Container, st containerStatus, f *runtimeapi.ContainerFilter) bool {
	if f == nil {
		return true
	}
	if f.GetId() != "" && !strings.HasPrefix(c.ID, f.GetId()) {
		return false
	}
	if f.GetPodSandboxId() != "" && !strings.HasPrefix(c.SandboxID, f.GetPodSandboxId()) {
		return false
	}
	if v := f.GetState(); v != nil && v.GetState() != st.State {
		return false
	}
	return pod.LabelsMatch(c.Config.GetLabels(), f.GetLabelSelector())
}
