package stats

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// usage_nano_cores is the rate over a window of at least minRateWindow that no
// caller can shorten: calls closer together share the base point.
func TestCPUWindow(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	const core = uint64(time.Second) // one busy core: 1e9 ns of CPU per second
	// busy is the CPU time of one busy core at ms.
	busy := func(ms int) uint64 { return uint64(ms) * uint64(time.Millisecond) }
	type call struct {
		ms     int
		nanos  uint64
		want   uint64
		wantOK bool
		// between: the rate is between the old load's and the new one's.
		between bool
	}
	tests := []struct {
		name  string
		first cpuPoint
		calls []call
	}{
		{
			name: "no first point: nothing until a point is a second old",
			calls: []call{
				{ms: 0, nanos: busy(0)},
				{ms: 5, nanos: busy(5)},     // 5 ms later: no rate from a 5 ms window
				{ms: 999, nanos: busy(999)}, // still under a second
				{ms: 1000, nanos: busy(1000), want: core, wantOK: true},
			},
		},
		{
			name:  "a container's start is its first point",
			first: cpuPoint{at: at(0)},
			calls: []call{
				{ms: 500, nanos: busy(500) / 2},
				{ms: 2000, nanos: busy(2000) / 2, want: core / 2, wantOK: true},
			},
		},
		{
			name: "two callers a few ms apart: both over the same window",
			calls: []call{
				{ms: 0, nanos: 0},
				{ms: 10000, nanos: busy(5000), want: core / 2, wantOK: true},
				{ms: 10003, nanos: busy(5000), want: 499850044, wantOK: true}, // (5e9)/(10.003 s)
				{ms: 20000, nanos: busy(15000), want: core, wantOK: true},     // base: the 10 000 ms point
				{ms: 20004, nanos: busy(15004), want: core, wantOK: true},     // base: the 10 003 ms point
			},
		},
		{
			name: "a caller every 10 ms cannot shorten the window",
			calls: func() []call {
				var cs []call
				for ms := 0; ms <= 3000; ms += 10 {
					c := call{ms: ms, nanos: busy(ms) / 4}
					if ms >= 1000 {
						c.want, c.wantOK = core/4, true
					}
					cs = append(cs, c)
				}
				// The load changes: the rate follows within about a window.
				for ms := 3010; ms <= 5000; ms += 10 {
					cs = append(cs, call{ms: ms, nanos: busy(3000)/4 + busy(ms-3000), wantOK: true, between: true})
				}
				return append(cs, call{ms: 5010, nanos: busy(3000)/4 + busy(2010), want: core, wantOK: true})
			}(),
		},
		{
			name: "a counter that goes back starts again",
			calls: []call{
				{ms: 0, nanos: busy(100000)},
				{ms: 2000, nanos: busy(102000), want: core, wantOK: true},
				{ms: 3000, nanos: busy(10)}, // a new cgroup: never a huge or negative rate
				{ms: 3500, nanos: busy(510)},
				{ms: 4000, nanos: busy(1010), want: core, wantOK: true},
			},
		},
		{
			name: "an older sample of a concurrent call is answered, not kept",
			calls: []call{
				{ms: 0, nanos: 0},
				{ms: 2000, nanos: busy(2000), want: core, wantOK: true},
				{ms: 1500, nanos: busy(1500), want: core, wantOK: true}, // base 0 ms
				{ms: 3000, nanos: busy(3000), want: core, wantOK: true},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r cpuRates
			for i, c := range tt.calls {
				got, ok := r.rate("c", cpuPoint{at: at(c.ms), nanos: c.nanos}, tt.first)
				require.Equal(t, c.wantOK, ok, "call %d at %d ms", i, c.ms)
				switch {
				case c.between:
					require.GreaterOrEqual(t, got, core/4-1e6, "call %d at %d ms", i, c.ms)
					require.LessOrEqual(t, got, core+1e6, "call %d at %d ms", i, c.ms)
				case c.wantOK:
					require.InDelta(t, float64(c.want), float64(got), 1e6, "call %d at %d ms", i, c.ms)
				default:
					require.Zero(t, got, "call %d at %d ms", i, c.ms)
				}
			}
			// However often it was asked, an object keeps about a window of points.
			require.LessOrEqual(t, len(r.byID["c"].points), int(minRateWindow/ratePointSpacing)+2)
		})
	}
}

// A first point after the sample, or above it, is no start (a clock that moved, a
// sample of another counter): the window starts at the sample.
func TestCPUWindowBadFirst(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var r cpuRates
	_, ok := r.rate("c", cpuPoint{at: t0, nanos: 5}, cpuPoint{at: t0.Add(time.Hour)})
	require.False(t, ok)
	_, ok = r.rate("d", cpuPoint{at: t0.Add(2 * time.Second), nanos: 5}, cpuPoint{at: t0, nanos: 6})
	require.False(t, ok)
	r.forget("c")
	require.NotContains(t, r.byID, "c")
}
