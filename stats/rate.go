package stats

import (
	"sync"
	"time"
)

// usage_nano_cores is a rate: CPU time used over wall time. containerd's CRI plugin
// samples every task and pod each second in the background and answers the rate
// between its last two samples. shimd keeps no collector (its cost on an idle node
// is the point of it): it keeps, per container and per pod, the few CPU samples
// that its stats calls took, and answers the rate from the newest of them that is
// at least minRateWindow older than the sample of the call, to that sample.
//
//   - The window is at least minRateWindow whoever calls and however often: two
//     calls a few milliseconds apart (the kubelet's summary and eviction paths, a
//     metrics-server scrape through the kubelet) answer rates over nearly the same
//     window, not the noise of a few milliseconds. A client that calls every 10 s
//     gets the rate over the last 10 s or so; containerd's is over its last second.
//   - A container's first point is its start (its cgroup is new then, its CPU time
//     about 0): its first call at least minRateWindow after the start answers the
//     average since the start; before that, 0.
//   - A pod's cgroup may be older than its sandbox (the kubelet keeps a pod's cgroup
//     when it makes a new sandbox for it), so a pod has no such first point: until
//     it has a point minRateWindow old, its rate is the sum of its containers'.
//   - A counter that goes back (a cgroup made anew, a pod read from its tasks'
//     sum after a container exited) starts the window again.
//
// Points closer than ratePointSpacing to the previous one are not kept, and those
// older than the window's base are dropped: an object keeps about
// minRateWindow/ratePointSpacing+1 points however often it is asked.
const (
	minRateWindow    = time.Second
	ratePointSpacing = 100 * time.Millisecond
)

// cpuPoint is a cumulative CPU time (ns) read at a time.
type cpuPoint struct {
	at    time.Time
	nanos uint64
}

// cpuWindow is one object's kept points, oldest first.
type cpuWindow struct{ points []cpuPoint }

// rate records p and returns the nano cores used from the newest kept point at
// least minRateWindow before p to p; ok is false when there is none.
func (w *cpuWindow) rate(p cpuPoint) (nanoCores uint64, ok bool) {
	if n := len(w.points); n > 0 && p.at.After(w.points[n-1].at) && p.nanos < w.points[n-1].nanos {
		w.points = w.points[:0] // the counter went back: a new counter
	}
	base := -1
	for i, q := range w.points {
		if p.at.Sub(q.at) >= minRateWindow {
			base = i
		}
	}
	if base >= 0 {
		b := w.points[base]
		if p.nanos >= b.nanos {
			nanoCores, ok = uint64(float64(p.nanos-b.nanos)/float64(p.at.Sub(b.at).Nanoseconds())*1e9), true
		}
	}
	n := len(w.points)
	if n > 0 && !p.at.After(w.points[n-1].at) {
		return nanoCores, ok // an older sample from a concurrent call: keep nothing
	}
	if base > 0 {
		w.points = append(w.points[:0], w.points[base:]...)
		n = len(w.points)
	}
	if n == 0 || p.at.Sub(w.points[n-1].at) >= ratePointSpacing {
		w.points = append(w.points, p)
	}
	return nanoCores, ok
}

// cpuRates keeps a cpuWindow per container id and per pod ("pod:" + id).
type cpuRates struct {
	mu   sync.Mutex
	byID map[string]*cpuWindow
}

// rate is the window's rate of id after p (see cpuWindow.rate). first, when not
// zero, is the point a new window starts from (a container's start).
func (r *cpuRates) rate(id string, p cpuPoint, first cpuPoint) (uint64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byID == nil {
		r.byID = map[string]*cpuWindow{}
	}
	w, ok := r.byID[id]
	if !ok {
		w = &cpuWindow{}
		if !first.at.IsZero() && first.at.Before(p.at) && first.nanos <= p.nanos {
			w.points = append(w.points, first)
		}
		r.byID[id] = w
	}
	return w.rate(p)
}

func (r *cpuRates) forget(id string) {
	r.mu.Lock()
	delete(r.byID, id)
	r.mu.Unlock()
}
