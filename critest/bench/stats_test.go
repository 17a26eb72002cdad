package bench

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	durs := func(vs ...int) []time.Duration {
		out := make([]time.Duration, len(vs))
		for i, v := range vs {
			out[i] = time.Duration(v) * time.Millisecond
		}
		return out
	}
	twenty := durs(20, 19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1)
	tests := []struct {
		name    string
		samples []time.Duration
		p       float64
		want    time.Duration
	}{
		{"empty", nil, 50, 0},
		{"one sample", durs(7), 50, 7 * time.Millisecond},
		{"one sample p90", durs(7), 90, 7 * time.Millisecond},
		{"p50 of two", durs(9, 3), 50, 3 * time.Millisecond},
		{"p50 of odd count", durs(5, 1, 3), 50, 3 * time.Millisecond},
		{"p50 of twenty", twenty, 50, 10 * time.Millisecond},
		{"p90 of twenty", twenty, 90, 18 * time.Millisecond},
		{"p95 of twenty", twenty, 95, 19 * time.Millisecond},
		{"p100 is the max", twenty, 100, 20 * time.Millisecond},
		{"tiny p is the min", twenty, 0.1, 1 * time.Millisecond},
		{"ties", durs(4, 4, 4, 1), 50, 4 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := percentile(tt.samples, tt.p); got != tt.want {
				t.Errorf("percentile(%v, %v) = %v, want %v", tt.samples, tt.p, got, tt.want)
			}
		})
	}
}

func TestPercentileKeepsInput(t *testing.T) {
	in := []time.Duration{3, 1, 2}
	percentile(in, 50)
	if in[0] != 3 || in[1] != 1 || in[2] != 2 {
		t.Errorf("percentile reordered its input: %v", in)
	}
}

func TestStepSamples(t *testing.T) {
	log := `time="2026-11-23T17:00:00Z" level=info msg="sandbox ready" ips="[198.18.0.5]" sandbox=ab steps="container=12.5ms files+netns=1ms cni=80ms task=120ms record=3ms"
time="2026-11-23T17:00:01Z" level=info msg="container created" container=cd sandbox=ab steps="lease+unpacked=1.2ms snapshot=4ms"
time="2026-11-23T17:00:01Z" level=info msg="sandbox ready" sandbox=ef steps="pauseless record+files+namespaces=9ms cni=70ms record=2ms"
time="2026-11-23T17:00:02Z" level=info msg="sandbox removed" sandbox=ab steps="container=99ms"
time="2026-11-23T17:00:02Z" level=info msg="container started" container=cd steps="nri=5µs task create=bad"
garbage line`
	got, order := stepSamples(log, "sandbox ready", "container created", "container started")
	want := map[string][]time.Duration{
		"sandbox ready: container":               {12500 * time.Microsecond},
		"sandbox ready: files+netns":             {time.Millisecond},
		"sandbox ready: cni":                     {80 * time.Millisecond, 70 * time.Millisecond},
		"sandbox ready: task":                    {120 * time.Millisecond},
		"sandbox ready: record":                  {3 * time.Millisecond, 2 * time.Millisecond},
		"sandbox ready: record+files+namespaces": {9 * time.Millisecond},
		"container created: lease+unpacked":      {1200 * time.Microsecond},
		"container created: snapshot":            {4 * time.Millisecond},
		"container started: nri":                 {5 * time.Microsecond},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d steps %v, want %d", len(got), got, len(want))
	}
	for k, v := range want {
		if !slices.Equal(got[k], v) {
			t.Errorf("%s: got %v, want %v", k, got[k], v)
		}
	}
	if order[0] != "sandbox ready: container" || order[len(order)-1] != "container started: nri" {
		t.Errorf("order %v", order)
	}
}

func TestParseCounts(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []int // nil: an error
	}{
		{"one", "10", []int{10}},
		{"two with spaces", "110, 250", []int{110, 250}},
		{"empty", "", nil},
		{"zero", "110,0", nil},
		{"negative", "-1", nil},
		{"not a number", "110,many", nil},
		{"trailing comma", "110,", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseCounts(tt.in)
			if (err != nil) != (tt.want == nil) || !slices.Equal(got, tt.want) {
				t.Errorf("parseCounts(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestPctCell(t *testing.T) {
	ten := make([]time.Duration, 10)
	for i := range ten {
		ten[i] = time.Duration(i+1) * time.Millisecond
	}
	for _, c := range []struct {
		samples []time.Duration
		p       float64
		want    string
	}{
		{nil, 50, "no samples"},
		{ten[:1], 50, "max of 1: 1.0 ms"},
		{ten[:3], 50, "2.0 ms (n=3)"},
		{ten[:9], 90, "max of 9: 9.0 ms"},
		{ten, 90, "9.0 ms (n=10)"},
		{ten, 99, "max of 10: 10.0 ms"},
	} {
		if got := pctCell(c.samples, c.p); got != c.want {
			t.Errorf("pctCell(%d samples, p%.0f) = %q, want %q", len(c.samples), c.p, got, c.want)
		}
	}
}

func TestTurns(t *testing.T) {
	s := []string{"a", "b", "c"}
	for i, want := range []string{"abc", "bca", "cab", "abc"} {
		if got := strings.Join(turns(s, i), ""); got != want {
			t.Errorf("turns(%v, %d) = %q, want %q", s, i, got, want)
		}
	}
}
