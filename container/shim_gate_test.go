package container

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shimd/shimd/pod"
)

// A task create whose shim went away is made again in a pause-less pod, up to 5
// times; any other failure, and any failure in a pod with a pause, is returned at
// once.
func TestCreatingTaskRetriesOnlyAShimThatWentAway(t *testing.T) {
	pods := &fakePods{sbs: map[string]*pod.Pod{
		"pl":    {ID: "pl", Pauseless: true},
		"pause": {ID: "pause"},
	}}
	s := New(Options{Pods: pods, Node: NodeInfo{CPUs: "0", MemoryNodes: "0"}})
	gone := errors.New("create task: failed to create shim task: ttrpc: closed")
	ctx := context.Background()
	calls := 0
	failing := func(errs ...error) func() error {
		calls = 0
		return func() error {
			calls++
			if calls <= len(errs) {
				return errs[calls-1]
			}
			return nil
		}
	}

	require.NoError(t, s.gates.creating(ctx, "pl", failing(gone, gone)))
	require.Equal(t, 3, calls, "two shims gone, then made")
	require.ErrorIs(t, s.gates.creating(ctx, "pl", failing(gone, gone, gone, gone, gone, gone)), gone)
	require.Equal(t, 5, calls, "tries")
	other := errors.New("create task: no such file")
	require.ErrorIs(t, s.gates.creating(ctx, "pl", failing(other)), other)
	require.Equal(t, 1, calls)
	require.ErrorIs(t, s.gates.creating(ctx, "pause", failing(gone)), gone)
	require.Equal(t, 1, calls, "a pod with a pause keeps its shim: nothing to retry")
	require.Zero(t, s.gates.inUse(), "a gate no one holds is forgotten")
	require.True(t, shimGone(errors.New("failed to start shim: start failed: failed to create TTRPC connection: dial unix /run/s/x: connect: connection refused")))
}

// In a pause-less pod a task delete waits for the creates under way, and a create
// for the delete.
func TestTaskDeleteWaitsForCreates(t *testing.T) {
	pods := &fakePods{sbs: map[string]*pod.Pod{"pl": {ID: "pl", Pauseless: true}}}
	s := New(Options{Pods: pods, Node: NodeInfo{CPUs: "0", MemoryNodes: "0"}})
	ctx := context.Background()
	creating, release := make(chan struct{}), make(chan struct{})
	go func() {
		_ = s.gates.creating(ctx, "pl", func() error { close(creating); <-release; return nil })
	}()
	<-creating
	deleted := make(chan struct{})
	go func() {
		_ = s.gates.deleting("pl", func() error { close(deleted); return nil })
	}()
	select {
	case <-deleted:
		t.Fatal("the delete ran while a create was under way")
	case <-time.After(100 * time.Millisecond):
	}
	require.Equal(t, 1, s.gates.inUse())
	close(release)
	select {
	case <-deleted:
	case <-time.After(5 * time.Second):
		t.Fatal("the delete never ran after the create")
	}
	require.Eventually(t, func() bool { return s.gates.inUse() == 0 }, 5*time.Second, time.Millisecond, "a gate no one holds is forgotten")
}

// In a pause-less pod two task creates never overlap: both could start a shim, and
// the loser's would be left running with no task. In a pod with a pause they do.
func TestTaskCreatesOneAtATimeInAPauselessPod(t *testing.T) {
	pods := &fakePods{sbs: map[string]*pod.Pod{"pl": {ID: "pl", Pauseless: true}, "pause": {ID: "pause"}}}
	s := New(Options{Pods: pods, Node: NodeInfo{CPUs: "0", MemoryNodes: "0"}})
	ctx := context.Background()
	for _, tc := range []struct {
		pod     string
		overlap bool
	}{{"pl", false}, {"pause", true}} {
		first, release := make(chan struct{}), make(chan struct{})
		go func() {
			_ = s.gates.creating(ctx, tc.pod, func() error { close(first); <-release; return nil })
		}()
		<-first
		second := make(chan struct{})
		go func() {
			_ = s.gates.creating(ctx, tc.pod, func() error { close(second); return nil })
		}()
		select {
		case <-second:
			require.True(t, tc.overlap, "%s: a second create ran while the first was under way", tc.pod)
		case <-time.After(100 * time.Millisecond):
			require.False(t, tc.overlap, "%s: the second create waited", tc.pod)
		}
		close(release)
		select {
		case <-second:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: the second create never ran", tc.pod)
		}
	}
	require.Eventually(t, func() bool { return s.gates.inUse() == 0 }, 5*time.Second, time.Millisecond)
}
