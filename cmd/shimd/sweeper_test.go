package main

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestSweepEvery(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	recovered := make(chan struct{})
	var mu sync.Mutex
	var calls []string
	record := func(name string) func(context.Context) {
		return func(context.Context) {
			mu.Lock()
			defer mu.Unlock()
			calls = append(calls, name)
		}
	}
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(calls)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sweepEvery(ctx, recovered, time.Millisecond, 20*time.Millisecond, record("sandboxes"), record("containers"))
	}()

	time.Sleep(50 * time.Millisecond)
	require.Zero(t, count(), "no sweep before recovery is done")
	close(recovered)
	require.Eventually(t, func() bool { return count() >= 6 }, 5*time.Second, time.Millisecond, "a sweep right after recovery, then every interval")
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("sweepEvery did not return after its context ended")
	}
	n := count()
	time.Sleep(50 * time.Millisecond)
	require.Equal(t, n, count(), "no sweep after the context ended")
	mu.Lock()
	defer mu.Unlock()
	for i, c := range calls {
		require.Equal(t, []string{"sandboxes", "containers"}[i%2], c, "the sweeps run in order, each time")
	}
}
