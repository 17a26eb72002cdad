package runtime

import (
	"context"
	"fmt"
	"io"
	"net"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/network"
	"github.com/shimd/shimd/pod"
)

// PortForward returns the URL of a port-forward session into a READY pod.
func (s *Service) PortForward(ctx context.Context, req *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error) {
	if err := validateID("pod_sandbox_id", req.GetPodSandboxId()); err != nil {
		return nil, err
	}
	for i, p := range req.GetPort() {
		if p <= 0 || p > 65535 {
			return nil, invalid(fmt.Sprintf("port[%d]", i), "%d is out of range 1-65535", p)
		}
	}
	sb, err := s.readySandbox(req.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	srv, err := s.streamingServer()
	if err != nil {
		return nil, err
	}
	r := proto.Clone(req).(*runtimeapi.PortForwardRequest)
	r.PodSandboxId = sb.ID
	return srv.GetPortForward(ctx, r)
}

func (s *Service) readySandbox(id string) (pod.Pod, error) {
	sb, err := s.opts.Sandboxes.Pod(id)
	if err != nil {
		return pod.Pod{}, err
	}
	if sb.State != pod.Ready {
		return pod.Pod{}, fmt.Errorf("sandbox %s is not ready: %w", sb.ID, errdefs.ErrFailedPrecondition)
	}
	return sb, nil
}

// PortForward connects the stream to 127.0.0.1:port inside the pod's network
// namespace (the host's for a host-network pod) and copies both ways. In a gVisor pod
// the pod's loopback lives in the sandbox's own network stack, not in the namespace:
// runsc connects the stream there. A port nobody listens on is an error, which the
// client sees on this stream only.
func (b streamBackend) PortForward(ctx context.Context, id string, port int32, stream io.ReadWriteCloser) error {
	sb, err := b.s.readySandbox(id)
	if err != nil {
		return err
	}
	if port <= 0 || port > 65535 {
		return invalid("port", "%d is out of range 1-65535", port)
	}
	rt, err := b.s.opts.Handlers.Get(sb.RuntimeHandler)
	if err != nil {
		return err
	}
	var conn net.Conn
	if rt.Dialer != nil {
		conn, err = rt.Dialer.DialSandbox(ctx, sb.ID, port)
	} else {
		conn, err = network.DialPod(sb.NetNSPath, port)
	}
	if err != nil {
		return err
	}
	if copyErr := network.Forward(conn, stream); copyErr != nil {
		// Not the client's business: it reports errors for the whole session.
		log.G(ctx).WithError(copyErr).WithField("sandbox", sb.ID).Debugf("port forward to %d ended", port)
	}
	return nil
}
