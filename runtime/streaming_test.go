package runtime

import (
	"context"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/container"
)

type fakeStreamingServer struct{ exec *runtimeapi.ExecRequest }

func (f *fakeStreamingServer) GetExec(_ context.Context, r *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error) {
	f.exec = r
	return &runtimeapi.ExecResponse{Url: "http://127.0.0.1:1/exec/x"}, nil
}

func (f *fakeStreamingServer) GetAttach(_ context.Context, r *runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error) {
	return &runtimeapi.AttachResponse{Url: "http://127.0.0.1:1/attach/x"}, nil
}

func (f *fakeStreamingServer) GetPortForward(_ context.Context, r *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error) {
	return &runtimeapi.PortForwardResponse{Url: "http://127.0.0.1:1/portforward/x"}, nil
}

// Exec, Attach and PortForward check the request before they look anything up;
// a container that is not there is NotFound (container.TestRunning covers the rest).
func TestStreamingRPCValidation(t *testing.T) {
	s := New(Options{Containers: container.New(container.Options{})})
	ok := &runtimeapi.ExecRequest{ContainerId: "running0123", Cmd: []string{"true"}, Stdout: true}
	tests := []struct {
		name string
		req  func(r *runtimeapi.ExecRequest)
		want error
	}{
		{"no container id", func(r *runtimeapi.ExecRequest) { r.ContainerId = "" }, errdefs.ErrInvalidArgument},
		{"no cmd", func(r *runtimeapi.ExecRequest) { r.Cmd = nil }, errdefs.ErrInvalidArgument},
		{"tty and stderr", func(r *runtimeapi.ExecRequest) { r.Tty, r.Stderr = true, true }, errdefs.ErrInvalidArgument},
		{"no streams", func(r *runtimeapi.ExecRequest) { r.Stdout = false }, errdefs.ErrInvalidArgument},
		{"unknown container", func(r *runtimeapi.ExecRequest) { r.ContainerId = "nope" }, errdefs.ErrNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := &runtimeapi.ExecRequest{ContainerId: ok.ContainerId, Cmd: ok.Cmd, Stdout: ok.Stdout}
			tt.req(req)
			_, err := s.Exec(context.Background(), req)
			require.ErrorIs(t, err, tt.want)
			areq := &runtimeapi.AttachRequest{ContainerId: req.ContainerId, Tty: req.Tty, Stdout: req.Stdout, Stderr: req.Stderr}
			if tt.name != "no cmd" {
				_, err = s.Attach(context.Background(), areq)
				require.ErrorIs(t, err, tt.want)
			}
		})
	}
	for _, req := range []*runtimeapi.PortForwardRequest{{}, {PodSandboxId: "p", Port: []int32{80, 0}}, {PodSandboxId: "p", Port: []int32{65536}}} {
		_, err := s.PortForward(context.Background(), req)
		require.ErrorIs(t, err, errdefs.ErrInvalidArgument, "%v", req)
	}
	_, err := s.streamingServer()
	require.ErrorIs(t, err, errdefs.ErrNotImplemented, "no streaming server set")
	s.SetStreaming(&fakeStreamingServer{})
	_, err = s.streamingServer()
	require.NoError(t, err)
}
