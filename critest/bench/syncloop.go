package bench

import (
	"bufio"
	"fmt"
	"sort"
	"strings"
	"time"
)

// syncLoopWindow is what a kubelet's sync loop did while the density pods arrived,
// read from its log at --v=4 (syncLoopQueue): from the first pod's receipt on the
// kubelet's watch to the last pod's "SyncLoop ADD".
type syncLoopWindow struct {
	window time.Duration
	// received is each pod's wait from "Receiving a new pod" (its pod config's first
	// merge of it) to its "SyncLoop ADD": the queue in front of the sync loop.
	received []time.Duration
	// adding is each ADD's share of the loop: from its line, written before
	// HandlePodAdditions runs, to the loop's next line; for every ADD in the window
	// but the last, whose next line can come after an idle wait.
	adding []time.Duration
	// housekeeping sums the durations of "SyncLoop (housekeeping) end" in the window.
	housekeeping time.Duration
	// pleg and probes count the loop's PLEG events and probe results in the window.
	pleg, probes int
}

// syncLoopQueue reads a kubelet log at --v=4; ok is false for a log with no "Receiving
// a new pod" line (a lower --v). ref is a time near the log's, for its year.
func syncLoopQueue(log string, ref time.Time) (w syncLoopWindow, ok bool, err error) {
	type loopLine struct {
		at   time.Time
		kind string
	}
	type housekeepingEnd struct {
		at time.Time
		d  time.Duration
	}
	received, added := map[string]time.Time{}, map[string]time.Time{}
	var loop []loopLine
	var hk []housekeepingEnd
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(make([]byte, 0, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		_, msg, found := strings.Cut(line, `] "`)
		if !found {
			continue
		}
		kind, _, _ := strings.Cut(msg, `"`)
		if kind != "Receiving a new pod" && !strings.HasPrefix(kind, "SyncLoop ") {
			continue
		}
		stamp, isInfo := stampOf(line)
		if !isInfo {
			continue
		}
		at, err := stamp.near(ref)
		if err != nil {
			return w, false, fmt.Errorf("%q: %w", line, err)
		}
		switch {
		case kind == "Receiving a new pod":
			if p := logField(line, "pod"); p != "" {
				if _, dup := received[p]; !dup {
					received[p] = at
				}
			}
		case kind == "SyncLoop (housekeeping) end":
			d, err := time.ParseDuration(logField(line, "duration"))
			if err != nil {
				return w, false, fmt.Errorf("housekeeping duration in %q: %w", line, err)
			}
			hk = append(hk, housekeepingEnd{at, d})
		default:
			loop = append(loop, loopLine{at, kind})
			_, pods := apiAdd(line)
			for _, p := range pods {
				if _, dup := added[p]; !dup {
					added[p] = at
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		return w, false, err
	}
	if len(received) == 0 {
		return w, false, nil
	}
	var first, last time.Time
	for p, add := range added {
		got, seen := received[p]
		if !seen {
			continue
		}
		w.received = append(w.received, add.Sub(got))
		if first.IsZero() || got.Before(first) {
			first = got
		}
		if add.After(last) {
			last = add
		}
	}
	if len(w.received) == 0 {
		return w, false, nil
	}
	sort.Slice(w.received, func(i, j int) bool { return w.received[i] < w.received[j] })
	w.window = last.Sub(first)
	in := func(t time.Time) bool { return !t.Before(first) && !t.After(last) }
	for i, l := range loop {
		if !in(l.at) {
			continue
		}
		switch {
		case l.kind == "SyncLoop ADD":
			// The last ADD ends the window; the loop may sit idle after it.
			if i+1 < len(loop) && in(loop[i+1].at) {
				w.adding = append(w.adding, loop[i+1].at.Sub(l.at))
			}
		case strings.HasPrefix(l.kind, "SyncLoop (PLEG)"):
			w.pleg++
		case l.kind == "SyncLoop (probe)":
			w.probes++
		}
	}
	for _, h := range hk {
		if in(h.at) {
			w.housekeeping += h.d
		}
	}
	return w, true, nil
}

// addingSum is the sync loop's time in HandlePodAdditions over the window.
func (w syncLoopWindow) addingSum() time.Duration {
	var s time.Duration
	for _, d := range w.adding {
		s += d
	}
	return s
}
