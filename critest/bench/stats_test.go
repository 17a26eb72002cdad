package bench

import (
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
