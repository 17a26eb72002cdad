package bench

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestWatchArrivalsAndPhases(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 13, 10, 38, 0, time.Local)
	clock := t0
	now := func() time.Time { clock = clock.Add(100 * time.Millisecond); return clock }
	seen := watchArrivals(strings.NewReader(`ADDED default/a 
MODIFIED default/a 
MODIFIED default/a node-1
MODIFIED default/a node-1
ADDED default/b node-1
DELETED default/c node-1
garbage
`), now)
	// a: seen at +0.1 s, bound at +0.3 s; b: both at +0.5 s; c never added.
	if a := seen["default/a"]; a.created != t0.Add(100*time.Millisecond) || a.bound != t0.Add(300*time.Millisecond) {
		t.Errorf("a = %+v", a)
	}
	if b := seen["default/b"]; b.created != t0.Add(500*time.Millisecond) || b.bound != b.created {
		t.Errorf("b = %+v", b)
	}
	if _, ok := seen["default/c"]; ok || len(seen) != 2 {
		t.Errorf("seen = %+v, want a and b only", seen)
	}
	log := `I1130 13:10:38.100000    1 kubelet.go:2760] "SyncLoop ADD" source="file" pods=["default/a"]
I1130 13:10:39.300000    1 kubelet.go:2760] "SyncLoop ADD" source="api" pods=["default/a","default/x"]
I1130 13:10:39.500000    1 kubelet.go:2760] "SyncLoop ADD" source="api" pods=["default/b"]
I1130 13:10:40.000000    1 kubelet.go:2760] "SyncLoop ADD" source="api" pods=["default/a"]
`
	got, err := arrivalPhases(log, seen)
	if err != nil {
		t.Fatal(err)
	}
	wantBind := []time.Duration{200 * time.Millisecond, 0}
	wantDeliver := []time.Duration{time.Second, time.Second}
	if !slices.Equal(got[phaseBind], wantBind) || !slices.Equal(got[phaseDeliver], wantDeliver) {
		t.Errorf("got %v, want bind %v, deliver %v", got, wantBind, wantDeliver)
	}
}
