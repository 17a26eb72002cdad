package runtime

import (
	"context"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/pod"
)

// ListPodSandbox lists sandboxes matching the filter (id or unique id prefix, state,
// label selector).
func (s *Service) ListPodSandbox(_ context.Context, req *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	f := req.GetFilter()
	resp := &runtimeapi.ListPodSandboxResponse{}
	for _, sb := range s.opts.Sandboxes.Pods() {
		if sandboxMatches(sb, f) {
			resp.Items = append(resp.Items, sb.CRI())
		}
	}
	return resp, nil
}

func sandboxMatches(sb pod.Pod, f *runtimeapi.PodSandboxFilter) bool {
	if f == nil {
		return true
	}
	if f.GetId() != "" && !strings.HasPrefix(sb.ID, f.GetId()) {
		return false
	}
	if st := f.GetState(); st != nil && st.GetState() != sb.State.CRIState() {
		return false
	}
	return pod.LabelsMatch(sb.Config.GetLabels(), f.GetLabelSelector())
}
