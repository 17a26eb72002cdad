package taskevents

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	eventstypes "github.com/containerd/containerd/api/events"
	"github.com/containerd/containerd/v2/core/events"
	"github.com/containerd/typeurl/v2"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// fakeEvents hands out one subscription at a time; the test sends on it or breaks it.
type fakeEvents struct {
	subs chan subscription
}

type subscription struct {
	envs chan *events.Envelope
	errs chan error
}

func (f *fakeEvents) Subscribe(ctx context.Context, _ ...string) (<-chan *events.Envelope, <-chan error) {
	s := subscription{envs: make(chan *events.Envelope), errs: make(chan error, 1)}
	go func() { // as containerd's client: the stream ends with its context
		<-ctx.Done()
		s.errs <- ctx.Err()
	}()
	f.subs <- s
	return s.envs, s.errs
}

func envelope(t *testing.T, ns string, ev any) *events.Envelope {
	t.Helper()
	a, err := typeurl.MarshalAnyToProto(ev)
	require.NoError(t, err)
	return &events.Envelope{Namespace: ns, Event: a}
}

// The monitor hands each exit to every exit handler in order, the deletes of tasks
// (not of exec processes) to the delete handlers, OOM kills to the OOM handlers, changes of image records to the image handlers, ignores other
// namespaces, tells the live handlers of every subscription (before the resync) and
// of every break, runs the resync handlers in order after every subscription (before
// any event), subscribes again when the stream breaks, and returns when its context
// ends.
func TestMonitor(t *testing.T) {
	var mu sync.Mutex
	var got []string
	note := func(s string) {
		mu.Lock()
		got = append(got, s)
		mu.Unlock()
	}
	seen := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), got...)
	}
	f := &fakeEvents{subs: make(chan subscription)}
	at := time.Unix(1700000000, 0).UTC()
	m := New(Options{
		Events: f, Namespace: "shimd",
		Exit: []ExitHandler{
			func(c, e string, st uint32, when time.Time) {
				note(fmt.Sprintf("sandboxes exit %s/%s %d %v", c, e, st, when.Equal(at)))
			},
			func(c, e string, st uint32, _ time.Time) { note(fmt.Sprintf("runtime exit %s/%s %d", c, e, st)) },
		},
		OOM: []OOMHandler{func(c string) { note("oom " + c) }},
		Delete: []DeleteHandler{func(c string, pid, st uint32, when time.Time) {
			note(fmt.Sprintf("delete %s %d %d %v", c, pid, st, when.Equal(at)))
		}},
		Resync: []func(context.Context){func(context.Context) { note("resync sandboxes") }, func(context.Context) { note("resync containers") }},
		Images: []func(){func() { note("images changed") }},
		Live:   []func(bool){func(live bool) { note(fmt.Sprintf("live %v", live)) }},
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()

	s := <-f.subs
	s.envs <- envelope(t, "other", &eventstypes.TaskExit{ContainerID: "x", ID: "x", ExitStatus: 1})
	s.envs <- envelope(t, "shimd", &eventstypes.TaskExit{ContainerID: "c1", ID: "c1", ExitStatus: 137, ExitedAt: timestamppb.New(at)})
	s.envs <- envelope(t, "shimd", &eventstypes.TaskOOM{ContainerID: "c2"})
	s.envs <- envelope(t, "shimd", &eventstypes.TaskDelete{ContainerID: "c2", Pid: 42, ExitStatus: 3, ExitedAt: timestamppb.New(at)})
	s.envs <- envelope(t, "shimd", &eventstypes.TaskDelete{ContainerID: "c2", ID: "exec2", Pid: 43, ExitStatus: 1})
	s.envs <- envelope(t, "shimd", &eventstypes.TaskExit{ContainerID: "c1", ID: "exec1", ExitStatus: 2, ExitedAt: timestamppb.New(at)})
	s.envs <- envelope(t, "other", &eventstypes.ImageDelete{Name: "x"})
	s.envs <- envelope(t, "shimd", &eventstypes.ImageCreate{Name: "a"})
	s.envs <- envelope(t, "shimd", &eventstypes.ImageUpdate{Name: "a"})
	s.envs <- envelope(t, "shimd", &eventstypes.ImageDelete{Name: "a"})
	s.errs <- errors.New("containerd went away")

	s = <-f.subs // subscribed again
	s.envs <- envelope(t, "shimd", &eventstypes.TaskExit{ContainerID: "c3", ID: "c3", ExitStatus: 0, ExitedAt: timestamppb.New(at)})
	require.Eventually(t, func() bool { return len(seen()) == 18 }, 5*time.Second, 10*time.Millisecond, "%q", seen())
	require.Equal(t, []string{
		"live true", "resync sandboxes", "resync containers",
		"sandboxes exit c1/c1 137 true", "runtime exit c1/c1 137",
		"oom c2",
		"delete c2 42 3 true",
		"sandboxes exit c1/exec1 2 true", "runtime exit c1/exec1 2",
		"images changed", "images changed", "images changed",
		"live false",
		"live true", "resync sandboxes", "resync containers",
		"sandboxes exit c3/c3 0 true", "runtime exit c3/c3 0",
	}, seen())

	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	require.Len(t, seen(), 18, "the monitor's own stop tells no handler: %q", seen())
}

// failingEvents refuses the first n subscriptions at once, as containerd's client
// does while containerd is not there, then hands out subscriptions as fakeEvents.
type failingEvents struct {
	fakeEvents
	mu    sync.Mutex
	n     int
	tries []time.Time
}

func (f *failingEvents) Subscribe(ctx context.Context, filters ...string) (<-chan *events.Envelope, <-chan error) {
	f.mu.Lock()
	f.tries = append(f.tries, time.Now())
	fail := len(f.tries) <= f.n
	f.mu.Unlock()
	if fail {
		errs := make(chan error, 1)
		errs <- errors.New("connection refused")
		return make(chan *events.Envelope), errs
	}
	return f.fakeEvents.Subscribe(ctx, filters...)
}

// While containerd is away, a subscription that fails at once runs no handler, and
// the monitor tries again at least every maxBackoff: the shims forward the exits of
// that time as soon as containerd answers, to whoever subscribed by then.
func TestMonitorSubscribesAgainSoon(t *testing.T) {
	f := &failingEvents{fakeEvents: fakeEvents{subs: make(chan subscription)}, n: 8}
	var calls sync.Map
	m := New(Options{
		Events: f, Namespace: "shimd",
		Resync: []func(context.Context){func(context.Context) { calls.Store("resync", true) }},
		Live:   []func(bool){func(live bool) { calls.Store(fmt.Sprintf("live %v", live), true) }},
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	select {
	case <-f.subs:
	case <-time.After(10 * time.Second):
		t.Fatal("no subscription after 8 refusals")
	}
	f.mu.Lock()
	tries := append([]time.Time(nil), f.tries...)
	f.mu.Unlock()
	require.Len(t, tries, 9)
	for i := 1; i < len(tries); i++ {
		require.Less(t, tries[i].Sub(tries[i-1]), maxBackoff+250*time.Millisecond, "try %d", i)
	}
	require.Eventually(t, func() bool {
		_, live := calls.Load("live true")
		_, resynced := calls.Load("resync")
		return live && resynced
	}, 5*time.Second, 10*time.Millisecond)
	_, notLive := calls.Load("live false")
	require.False(t, notLive, "a refused subscription was never live")
}
