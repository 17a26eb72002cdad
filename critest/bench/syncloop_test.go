package bench

import (
	"slices"
	"testing"
	"time"
)

func TestSyncLoopQueue(t *testing.T) {
	ref := time.Date(2026, 11, 30, 16, 0, 0, 0, time.Local)
	log := `I1130 16:11:49.900000   28100 kubelet.go:2860] "SyncLoop (housekeeping)"
I1130 16:11:49.926470   28100 kubelet.go:2862] "SyncLoop (housekeeping) end" duration="26ms"
I1130 16:11:50.000000   28100 config.go:330] "Receiving a new pod" pod="default/a"
I1130 16:11:50.100000   28100 config.go:330] "Receiving a new pod" pod="default/b"
I1130 16:11:50.200000   28100 kubelet.go:2760] "SyncLoop ADD" source="api" pods=["default/a"]
I1130 16:11:50.250000   28100 config.go:330] "Receiving a new pod" pod="default/a"
I1130 16:11:50.300000   28100 kubelet.go:2788] "SyncLoop (PLEG): event for pod" pod="default/x" event={"Type":"ContainerStarted"}
I1130 16:11:50.400000   28100 kubelet.go:2860] "SyncLoop (housekeeping)"
I1130 16:11:50.900000   28100 kubelet.go:2862] "SyncLoop (housekeeping) end" duration="500ms"
I1130 16:11:50.950000   28100 kubelet.go:2877] "SyncLoop (probe)" probe="readiness" status="ready" pod="default/x"
I1130 16:11:51.000000   28100 kubelet.go:2760] "SyncLoop ADD" source="api" pods=["default/b"]
I1130 16:11:51.030000   28100 kubelet.go:2773] "SyncLoop RECONCILE" source="api" pods=["default/a"]
I1130 16:11:52.000000   28100 kubelet.go:2788] "SyncLoop (PLEG): event for pod" pod="default/b" event={}
E1130 16:11:52.100000   28100 kubelet.go:2760] "SyncLoop ADD" source="api" pods=["default/c"]
`
	w, ok, err := syncLoopQueue(log, ref)
	if err != nil || !ok {
		t.Fatalf("ok=%v err=%v", ok, err)
	}
	ms := time.Millisecond
	// a: 50.0 → 50.2; b: 50.1 → 51.0 (a's second receipt does not count).
	if want := []time.Duration{200 * ms, 900 * ms}; !slices.Equal(w.received, want) {
		t.Errorf("received = %v, want %v", w.received, want)
	}
	if w.window != time.Second {
		t.Errorf("window = %v, want 1s (50.0 to 51.0)", w.window)
	}
	// a's ADD until the PLEG line (100 ms); b's ADD ends the window, and the RECONCILE
	// after it is outside, so b's share is not counted.
	if want := []time.Duration{100 * ms}; !slices.Equal(w.adding, want) || w.addingSum() != 100*ms {
		t.Errorf("adding = %v, want %v", w.adding, want)
	}
	if w.housekeeping != 500*ms || w.pleg != 1 || w.probes != 1 {
		t.Errorf("housekeeping %v pleg %d probes %d, want 500ms 1 1", w.housekeeping, w.pleg, w.probes)
	}
	if _, ok, err := syncLoopQueue(`I1130 16:11:50.200000   28100 kubelet.go:2760] "SyncLoop ADD" source="api" pods=["default/a"]`, ref); ok || err != nil {
		t.Errorf("a --v=2 log: ok=%v err=%v, want false, nil", ok, err)
	}
}
