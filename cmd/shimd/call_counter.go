package main

import (
	"context"
	"sync"

	"google.golang.org/grpc"
)

// callCounter counts shimd's calls to containerd by gRPC method, for /debug/stats: each
// call costs CPU in both daemons, so the count per pod lifecycle is what to cut.
type callCounter struct {
	mu    sync.Mutex
	calls map[string]uint64
}

var containerdCalls = &callCounter{calls: map[string]uint64{}}

func (c *callCounter) add(method string) {
	c.mu.Lock()
	c.calls[method]++
	c.mu.Unlock()
}

// snapshot copies the counts.
func (c *callCounter) snapshot() map[string]uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]uint64, len(c.calls))
	for k, v := range c.calls {
		out[k] = v
	}
	return out
}

// dialOptions are the interceptors that count unary calls and streams.
func (c *callCounter) dialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			c.add(method)
			return invoker(ctx, method, req, reply, cc, opts...)
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			c.add(method)
			return streamer(ctx, desc, cc, method, opts...)
		}),
	}
}
