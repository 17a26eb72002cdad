package main

import (
	"context"
	"math"
	"sync"
	"time"

	"google.golang.org/grpc"
)

// callCounter counts shimd's calls to containerd by gRPC method, and times the unary
// ones, for /debug/stats: each call costs CPU in both daemons and time in the CRI
// call that waits on it, so the count and the latency per pod lifecycle are what
// to cut (docs/benchmarks.md reads them during bursts).
type callCounter struct {
	mu    sync.Mutex
	calls map[string]uint64
	times map[string]*callTimes
}

// Latency buckets: callBucketsPerOctave per doubling, from 1 µs; bucket i holds
// the calls that took [2^(i/4), 2^((i+1)/4)) µs, bucket 0 also those under 1 µs,
// the last also those over about 2^27 µs (2.2 minutes).
const (
	callBucketsPerOctave = 4
	callBuckets          = 27 * callBucketsPerOctave
)

// callTimes is the latency of one method's unary calls since shimd started.
type callTimes struct {
	Count   uint64              `json:"count"`
	TotalNS uint64              `json:"total_ns"`
	MaxNS   uint64              `json:"max_ns"`
	Buckets [callBuckets]uint64 `json:"buckets"`
}

var containerdCalls = newCallCounter()

func newCallCounter() *callCounter {
	return &callCounter{calls: map[string]uint64{}, times: map[string]*callTimes{}}
}

// add counts a stream of method (unary calls are counted by observe).
func (c *callCounter) add(method string) {
	c.mu.Lock()
	c.calls[method]++
	c.mu.Unlock()
}

// observe counts a unary call of method that took d, and adds its time: one lock
// per call on the pod paths.
func (c *callCounter) observe(method string, d time.Duration) {
	b := callBucket(d)
	c.mu.Lock()
	c.calls[method]++
	t := c.times[method]
	if t == nil {
		t = &callTimes{}
		c.times[method] = t
	}
	t.Count++
	t.TotalNS += uint64(d)
	t.MaxNS = max(t.MaxNS, uint64(d))
	t.Buckets[b]++
	c.mu.Unlock()
}

// callBucket is the latency bucket of d.
func callBucket(d time.Duration) int {
	us := float64(d) / float64(time.Microsecond)
	if us < 1 {
		return 0
	}
	return min(int(math.Log2(us)*callBucketsPerOctave), callBuckets-1)
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

// timesSnapshot copies the latencies.
func (c *callCounter) timesSnapshot() map[string]callTimes {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]callTimes, len(c.times))
	for k, v := range c.times {
		out[k] = *v
	}
	return out
}

// dialOptions are the interceptors that count unary calls and streams, and time the
// unary calls.
func (c *callCounter) dialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			start := time.Now()
			err := invoker(ctx, method, req, reply, cc, opts...)
			c.observe(method, time.Since(start))
			return err
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			c.add(method)
			return streamer(ctx, desc, cc, method, opts...)
		}),
	}
}
