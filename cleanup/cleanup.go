// Package cleanup runs again, in the background, the cleanups that failed: the
// delete of a container that recovery found half-created, the undo of a
// RunPodSandbox or CreateContainer that failed. Such a cleanup can fail because
// containerd or a shim is busy (a shim still finishing a task's create or delete
// that a crash cut short) or away; no RPC will ever ask for that object again, so
// without a retry it would stay until the next restart of shimd. Recovery's reads
// that got no answer go the same way: the state of a task whose shim did not
// answer containerd in time is read again until it is known (a pod's pause task,
// a container's task to adopt).
//
// A retry only ever runs the cleanup that the owner of the object decided; the
// queue decides nothing from what it finds in containerd. It holds the cleanups in
// memory: after a restart, recovery decides again from the records.
package cleanup

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/containerd/log"
)

// The default backoff: the first retry comes FirstRetry after the failure; each
// failed retry doubles the wait, up to MaxRetryWait.
const (
	FirstRetry   = time.Second
	MaxRetryWait = time.Minute
)

// RecoveryAttempt bounds one cleanup that recovery runs before shimd serves (the
// undo of a Run or a create that a crash cut short). containerd bounds no call to a
// shim but its state reads: a delete or kill through a shim that does not answer
// waits for as long as it is stuck, and shimd would not serve meanwhile. A cleanup
// that takes longer fails, and the queue runs it again.
const RecoveryAttempt = 10 * time.Second

// RecoveryReads is how many task states recovery reads from containerd at once:
// containerd waits up to 2 s for each from its shim, so busy shims cost that once.
const RecoveryReads = 16

// Queue holds failed cleanups by key and runs each again until it succeeds. Its
// zero value is not usable: call New.
type Queue struct {
	// Timeout bounds one attempt.
	Timeout time.Duration
	// First and Max are the backoff: the first retry comes First after the
	// failure, each failed retry doubles the wait, up to Max.
	First, Max time.Duration

	mu      sync.Mutex
	pending map[string]*item
	kick    chan struct{}
	// retried counts the cleanups that succeeded on a retry.
	retried int
}

type item struct {
	fn       func(context.Context) error
	next     time.Time
	wait     time.Duration
	attempts int
}

// New makes an empty queue; Run runs it.
func New() *Queue {
	return &Queue{Timeout: 2 * time.Minute, First: FirstRetry, Max: MaxRetryWait, pending: map[string]*item{}, kick: make(chan struct{}, 1)}
}

// Add queues fn, a cleanup that just failed, under key (say "container <id>"); a
// cleanup already queued under key is replaced. fn must be idempotent: what the
// failed attempt did do is gone already.
func (q *Queue) Add(key string, fn func(context.Context) error) {
	q.mu.Lock()
	q.pending[key] = &item{fn: fn, next: time.Now().Add(q.First), wait: q.First}
	q.mu.Unlock()
	select {
	case q.kick <- struct{}{}:
	default:
	}
}

// Pending returns the keys of the queued cleanups, sorted.
func (q *Queue) Pending() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	keys := make([]string, 0, len(q.pending))
	for k := range q.pending {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Retried is the number of cleanups that succeeded on a retry.
func (q *Queue) Retried() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.retried
}

// Run retries the queued cleanups when they are due, one at a time, until ctx ends.
func (q *Queue) Run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		q.runDue(ctx)
		timer.Reset(q.untilNext())
		select {
		case <-ctx.Done():
			return
		case <-q.kick:
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
		case <-timer.C:
		}
	}
}

// untilNext is the time until the next cleanup is due; an hour if none is queued
// (an Add wakes Run sooner).
func (q *Queue) untilNext() time.Duration {
	q.mu.Lock()
	defer q.mu.Unlock()
	wait := time.Hour
	for _, it := range q.pending {
		wait = min(wait, time.Until(it.next))
	}
	return max(wait, 0)
}

// runDue runs each cleanup that is due once.
func (q *Queue) runDue(ctx context.Context) {
	now := time.Now()
	q.mu.Lock()
	var due []string
	for k, it := range q.pending {
		if !it.next.After(now) {
			due = append(due, k)
		}
	}
	q.mu.Unlock()
	sort.Strings(due)
	for _, key := range due {
		if ctx.Err() != nil {
			return
		}
		q.mu.Lock()
		it := q.pending[key]
		q.mu.Unlock()
		if it == nil {
			continue
		}
		actx, cancel := context.WithTimeout(ctx, q.Timeout)
		err := it.fn(actx)
		cancel()
		q.mu.Lock()
		if q.pending[key] != it {
			// Replaced by an Add meanwhile: the new cleanup keeps its own schedule.
			q.mu.Unlock()
			continue
		}
		it.attempts++
		if err == nil {
			delete(q.pending, key)
			q.retried++
			q.mu.Unlock()
			log.G(ctx).WithField("cleanup", key).WithField("attempts", it.attempts).Info("done on a retry")
			continue
		}
		it.wait = min(2*it.wait, q.Max)
		it.next = time.Now().Add(it.wait)
		wait := it.wait
		q.mu.Unlock()
		log.G(ctx).WithError(err).WithField("cleanup", key).WithField("attempts", it.attempts).
			WithField("next_in", wait).Warn("failed again; will retry")
	}
}
