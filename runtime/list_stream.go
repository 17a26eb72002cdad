package runtime

import (
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The streaming list RPCs (CRI v0.37, the kubelet's CRIListStreaming feature) send
// what the matching List RPC returns, listStreamChunk items per message, so that no
// response approaches the gRPC message size limit on a node with many pods; the
// stream ends after the last item (no message for an empty list).
const listStreamChunk = 100

// sendChunks calls send with consecutive slices of items of at most listStreamChunk.
func sendChunks[T any](items []T, send func([]T) error) error {
	for len(items) > 0 {
		n := min(listStreamChunk, len(items))
		if err := send(items[:n]); err != nil {
			return err
		}
		items = items[n:]
	}
	return nil
}

// StreamPodSandboxes is ListPodSandbox as a stream.
func (s *Service) StreamPodSandboxes(req *runtimeapi.StreamPodSandboxesRequest, stream runtimeapi.RuntimeService_StreamPodSandboxesServer) error {
	resp, err := s.ListPodSandbox(stream.Context(), &runtimeapi.ListPodSandboxRequest{Filter: req.GetFilter()})
	if err != nil {
		return err
	}
	return sendChunks(resp.Items, func(c []*runtimeapi.PodSandbox) error {
		return stream.Send(&runtimeapi.StreamPodSandboxesResponse{PodSandboxes: c})
	})
}

// StreamContainers is ListContainers as a stream.
func (s *Service) StreamContainers(req *runtimeapi.StreamContainersRequest, stream runtimeapi.RuntimeService_StreamContainersServer) error {
	resp, err := s.ListContainers(stream.Context(), &runtimeapi.ListContainersRequest{Filter: req.GetFilter()})
	if err != nil {
		return err
	}
	return sendChunks(resp.Containers, func(c []*runtimeapi.Container) error {
		return stream.Send(&runtimeapi.StreamContainersResponse{Containers: c})
	})
}

// StreamContainerStats is ListContainerStats as a stream.
func (s *Service) StreamContainerStats(req *runtimeapi.StreamContainerStatsRequest, stream runtimeapi.RuntimeService_StreamContainerStatsServer) error {
	resp, err := s.ListContainerStats(stream.Context(), &runtimeapi.ListContainerStatsRequest{Filter: req.GetFilter()})
	if err != nil {
		return err
	}
	return sendChunks(resp.Stats, func(c []*runtimeapi.ContainerStats) error {
		return stream.Send(&runtimeapi.StreamContainerStatsResponse{ContainerStats: c})
	})
}

// StreamPodSandboxStats is ListPodSandboxStats as a stream.
func (s *Service) StreamPodSandboxStats(req *runtimeapi.StreamPodSandboxStatsRequest, stream runtimeapi.RuntimeService_StreamPodSandboxStatsServer) error {
	resp, err := s.ListPodSandboxStats(stream.Context(), &runtimeapi.ListPodSandboxStatsRequest{Filter: req.GetFilter()})
	if err != nil {
		return err
	}
	return sendChunks(resp.Stats, func(c []*runtimeapi.PodSandboxStats) error {
		return stream.Send(&runtimeapi.StreamPodSandboxStatsResponse{PodSandboxStats: c})
	})
}
