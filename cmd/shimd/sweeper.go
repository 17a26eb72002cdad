package main

import (
	"context"
	"time"

	"github.com/containerd/log"
)

// sweepTimeout bounds one sweep: a containerd that stops answering delays the
// next one, it does not stop them.
const sweepTimeout = 2 * time.Minute

// sweepEvery runs sweeps in order once recovered is closed: first after first, then
// every interval, until ctx ends. A cleanup that failed (a container delete while its
// shim was still busy with a task that shimd's death cut short, the undo of a failed
// create) leaves something no RPC will ever ask for again; the sweeps find and remove
// such leftovers, so a retry needs nobody.
func sweepEvery(ctx context.Context, recovered <-chan struct{}, first, interval time.Duration, sweeps ...func(context.Context)) {
	select {
	case <-recovered:
	case <-ctx.Done():
		return
	}
	timer := time.NewTimer(min(first, interval))
	defer timer.Stop()
	for {
		select {
		case <-timer.C:
		case <-ctx.Done():
			return
		}
		t0 := time.Now()
		for _, sweep := range sweeps {
			if ctx.Err() != nil {
				return
			}
			sctx, cancel := context.WithTimeout(ctx, sweepTimeout)
			sweep(sctx)
			cancel()
		}
		log.G(ctx).WithField("took", time.Since(t0)).Debug("periodic sweep done")
		timer.Reset(interval)
	}
}
