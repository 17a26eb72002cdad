package main

import (
	"time"

	"github.com/containerd/containerd/v2/client"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
)

// reconnectBackoff is how shimd's connection to containerd retries after containerd
// went away. The client's default lets the delay grow to its 10 s call timeout, so
// after a restart of containerd every RPC that needs it kept failing with
// Unavailable for up to 10 s more, although containerd was back. Redialling a local
// socket costs next to nothing: retry at least every half second.
var reconnectBackoff = grpc.ConnectParams{
	Backoff: backoff.Config{
		BaseDelay:  100 * time.Millisecond,
		Multiplier: 1.6,
		Jitter:     0.2,
		MaxDelay:   500 * time.Millisecond,
	},
	MinConnectTimeout: 10 * time.Second,
}

// newContainerdClient connects to containerd with shimd's namespace as the default
// and the reconnect backoff above (a later connect-params option replaces the
// client's own); every call is counted for /debug/stats.
func newContainerdClient(cfg ContainerdConfig) (*client.Client, error) {
	return client.New(cfg.Address,
		client.WithDefaultNamespace(cfg.Namespace),
		client.WithExtraDialOpts(append([]grpc.DialOption{grpc.WithConnectParams(reconnectBackoff)}, containerdCalls.dialOptions()...)))
}
