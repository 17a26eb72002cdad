package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/containerd/log"
	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// listenCRI opens the CRI unix socket: parent created, a stale socket removed, mode 0660.
func listenCRI(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o711); err != nil {
		return nil, fmt.Errorf("create socket dir: %w", err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("%s exists and is not a socket", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("%s is in use by another process", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("remove stale socket: %w", err)
		}
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o660); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// newGRPCServer builds the CRI server with shimd's interceptors.
func newGRPCServer(ready *atomic.Bool, m *metrics, rs runtimeapi.RuntimeServiceServer, is runtimeapi.ImageServiceServer) *grpc.Server {
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(unaryInterceptor(ready, m)),
		grpc.ChainStreamInterceptor(streamInterceptor(ready, m)),
		grpc.MaxRecvMsgSize(16<<20),
		// ExecSync answers up to 16 MiB of stdout plus 16 MiB of stderr.
		grpc.MaxSendMsgSize(40<<20),
	)
	runtimeapi.RegisterRuntimeServiceServer(srv, rs)
	if is != nil {
		runtimeapi.RegisterImageServiceServer(srv, is)
	}
	return srv
}

// serveUntil serves until ctx ends, then stops accepting, lets in-flight calls finish
// (bounded by grace) and returns.
func serveUntil(ctx context.Context, srv *grpc.Server, l net.Listener, grace time.Duration) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.G(ctx).Info("shutting down: finishing in-flight calls")
	notifySystemd(ctx, sdStopping)
	done := make(chan struct{})
	go func() { srv.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(grace):
		log.G(ctx).Warn("in-flight calls did not finish in time; closing")
		srv.Stop()
	}
	if err := <-errc; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return err
	}
	return nil
}
