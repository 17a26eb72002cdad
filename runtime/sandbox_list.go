package runtime

import (
	"context"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/sandbox"
)

// ListPodSandbox lists sandboxes matching the filter (id or unique id prefix, state,
// label selector).
func (s *Service) ListPodSandbox(_ context.Context, req *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	f := req.GetFilter()
	resp := &runtimeapi.ListPodSandboxResponse{}
	for _, sb := range s.opts.Sandboxes.List() {
		if sandboxMatches(sb, f) {
			resp.Items = append(resp.Items, toSandbox(sb))
		}
	}
	return resp, nil
}

func sandboxMatches(sb *sandbox.Sandbox, f *runtimeapi.PodSandboxFilter) bool {
	if f == nil {
		return true
	}
	if f.GetId() != "" && !strings.HasPrefix(sb.ID, f.GetId()) {
		return false
	}
	if st := f.GetState(); st != nil && st.GetState() != toSandboxState(sb.State()) {
		return false
	}
	return labelsMatch(sb.Config.GetLabels(), f.GetLabelSelector())
}

// labelsMatch tells whether labels has every key=value of the selector.
func labelsMatch(labels, selector map[string]string) bool {
	for k, v := range selector {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}
