package cleanup

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A cleanup that fails is retried with a doubling wait until it succeeds, then
// leaves the queue; one that succeeds at its first retry runs once.
func TestQueueRetriesUntilDone(t *testing.T) {
	q := New()
	q.First, q.Max = 100*time.Millisecond, 300*time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var times []time.Time
	q.Add("container a", func(context.Context) error {
		mu.Lock()
		defer mu.Unlock()
		times = append(times, time.Now())
		if len(times) < 3 {
			return errors.New("shim busy")
		}
		return nil
	})
	onceRuns := 0
	q.Add("sandbox b", func(context.Context) error { onceRuns++; return nil })
	added := time.Now()
	require.Equal(t, []string{"container a", "sandbox b"}, q.Pending())
	go q.Run(ctx)
	require.Eventually(t, func() bool { return len(q.Pending()) == 0 }, 10*time.Second, 10*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, times, 3)
	require.Equal(t, 1, onceRuns)
	require.Equal(t, 2, q.Retried())
	// Due First after the failure, then twice that after a failed retry, then Max.
	require.GreaterOrEqual(t, times[0].Sub(added), 90*time.Millisecond)
	require.GreaterOrEqual(t, times[1].Sub(times[0]), 190*time.Millisecond)
	require.GreaterOrEqual(t, times[2].Sub(times[1]), 290*time.Millisecond)
}

// Adding under a queued key replaces the cleanup; Run ends with its context.
func TestQueueReplaceAndStop(t *testing.T) {
	q := New()
	q.First = 10 * time.Millisecond
	ran := make(chan string, 4)
	q.Add("k", func(context.Context) error { ran <- "old"; return nil })
	q.Add("k", func(context.Context) error { ran <- "new"; return nil })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { q.Run(ctx); close(done) }()
	require.Equal(t, "new", <-ran)
	require.Eventually(t, func() bool { return len(q.Pending()) == 0 }, 5*time.Second, 10*time.Millisecond)
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not end with its context")
	}
	require.Empty(t, ran)
}

// An attempt gets the queue's timeout.
func TestQueueAttemptTimeout(t *testing.T) {
	q := New()
	q.Timeout, q.First = 50*time.Millisecond, 10*time.Millisecond
	got := make(chan error, 1)
	q.Add("slow", func(ctx context.Context) error {
		<-ctx.Done()
		got <- ctx.Err()
		return ctx.Err()
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go q.Run(ctx)
	select {
	case err := <-got:
		require.ErrorIs(t, err, context.DeadlineExceeded)
	case <-time.After(5 * time.Second):
		t.Fatal("the attempt never ran")
	}
	require.Equal(t, []string{"slow"}, q.Pending(), "a failed attempt stays queued")
}
