package runtime

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/pod"
	"github.com/shimd/shimd/stats"
)

// ListMetricDescriptors lists the metrics ListPodSandboxMetrics reports (named as
// cAdvisor names them).
func (s *Service) ListMetricDescriptors(context.Context, *runtimeapi.ListMetricDescriptorsRequest) (*runtimeapi.ListMetricDescriptorsResponse, error) {
	return &runtimeapi.ListMetricDescriptorsResponse{Descriptors: stats.Descriptors()}, nil
}

// ListPodSandboxMetrics reports the metrics of every READY pod and its running
// containers.
func (s *Service) ListPodSandboxMetrics(ctx context.Context, _ *runtimeapi.ListPodSandboxMetricsRequest) (*runtimeapi.ListPodSandboxMetricsResponse, error) {
	resp := &runtimeapi.ListPodSandboxMetricsResponse{}
	for _, p := range s.opts.Sandboxes.Pods() {
		if p.State != pod.Ready {
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		resp.PodMetrics = append(resp.PodMetrics, s.opts.Stats.PodMetrics(ctx, p))
	}
	return resp, nil
}

// StreamPodSandboxMetrics is ListPodSandboxMetrics in chunks.
func (s *Service) StreamPodSandboxMetrics(_ *runtimeapi.StreamPodSandboxMetricsRequest, stream runtimeapi.RuntimeService_StreamPodSandboxMetricsServer) error {
	resp, err := s.ListPodSandboxMetrics(stream.Context(), &runtimeapi.ListPodSandboxMetricsRequest{})
	if err != nil {
		return err
	}
	return sendChunks(resp.PodMetrics, func(c []*runtimeapi.PodSandboxMetrics) error {
		return stream.Send(&runtimeapi.StreamPodSandboxMetricsResponse{PodSandboxMetrics: c})
	})
}
