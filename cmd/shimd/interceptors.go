package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"runtime/debug"
	"runtime/trace"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
	"github.com/containerd/log"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// readOnlyRPCs are logged at debug; every other RPC mutates and is logged at info.
var readOnlyRPCs = map[string]bool{
	"Version": true, "Status": true, "RuntimeConfig": true, "ListPodSandbox": true,
	"PodSandboxStatus": true, "ListContainers": true, "ContainerStatus": true,
	"ListImages": true, "ImageStatus": true, "ImageFsInfo": true, "ContainerStats": true,
	"ListContainerStats": true, "PodSandboxStats": true, "ListPodSandboxStats": true,
	"ListMetricDescriptors": true, "ListPodSandboxMetrics": true, "GetContainerEvents": true,
}

// answersDuringRecovery are the RPCs that need no recovered state: Version, and
// ListMetricDescriptors, which the kubelet asks once when it starts.
var answersDuringRecovery = map[string]bool{"Version": true, "ListMetricDescriptors": true}

// unaryInterceptor gives each call a request id and a logger, refuses calls until
// recovery is done, turns panics into Internal, maps errdefs classes to gRPC codes
// in this one place, and records the call's metrics.
func unaryInterceptor(ready *atomic.Bool, m *metrics) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		rpc := info.FullMethod[strings.LastIndex(info.FullMethod, "/")+1:]
		entry := log.G(ctx).WithField("rpc", rpc).WithField("req", requestID())
		ctx = log.WithLogger(ctx, entry)
		start := time.Now()
		m.inFlight.Inc()
		// In an execution trace (debug.address's /debug/pprof/trace) each call is a
		// region named by its RPC; nothing is done when no trace is being taken.
		region := trace.StartRegion(ctx, rpc)
		defer func() {
			region.End()
			if p := recover(); p != nil {
				entry.WithField("panic", p).Error(string(debug.Stack()))
				err = status.Errorf(codes.Internal, "%s: internal error: %v", rpc, p)
			}
			err = toGRPC(ctx, err)
			m.inFlight.Dec()
			m.observeRPC(rpc, status.Code(err), time.Since(start))
			e := entry.WithField("duration", time.Since(start).String())
			switch {
			case err != nil:
				e.WithError(err).Warn("failed")
			case readOnlyRPCs[rpc]:
				e.Debug("done")
			default:
				e.Info("done")
			}
		}()
		if !ready.Load() && !answersDuringRecovery[rpc] {
			return nil, status.Error(codes.Unavailable, "shimd is recovering its state; try again shortly")
		}
		return handler(ctx, req)
	}
}

// streamInterceptor does the same for streaming RPCs (GetContainerEvents, the
// Stream* lists).
func streamInterceptor(ready *atomic.Bool, m *metrics) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
		rpc := info.FullMethod[strings.LastIndex(info.FullMethod, "/")+1:]
		start := time.Now()
		m.inFlight.Inc()
		defer func() {
			if p := recover(); p != nil {
				err = status.Errorf(codes.Internal, "internal error: %v", p)
			}
			m.inFlight.Dec()
			m.observeRPC(rpc, status.Code(err), time.Since(start))
		}()
		if !ready.Load() {
			return status.Error(codes.Unavailable, "shimd is recovering its state; try again shortly")
		}
		return toGRPC(ss.Context(), handler(srv, ss))
	}
}

// toGRPC maps an error to a gRPC status: errors that already carry a status keep it,
// context errors become DeadlineExceeded/Canceled, errdefs classes their codes.
func toGRPC(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, context.Canceled):
		if ctx.Err() != nil {
			return status.Error(codes.Canceled, err.Error())
		}
	case errdefs.IsUnavailable(err):
		return status.Error(codes.Unavailable, err.Error())
	case noSpace(err):
		return status.Error(codes.ResourceExhausted, err.Error())
	}
	// errgrpc keeps the message and picks the code from the errdefs class.
	return errgrpc.ToGRPC(err)
}

// noSpace tells whether err is a full disk or quota, shimd's own (ENOSPC, EDQUOT)
// or containerd's (which reaches shimd as text).
func noSpace(err error) bool {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, syscall.ENOSPC.Error()) || strings.Contains(msg, syscall.EDQUOT.Error())
}

func requestID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
