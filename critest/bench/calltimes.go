package bench

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// callTimes is one method's entry in shimd's /debug/stats "containerd_call_times":
// the latency of its unary calls to containerd since shimd started, in buckets of
// a quarter octave from 1 µs (cmd/shimd/call_counter.go).
type callTimes struct {
	Count   uint64   `json:"count"`
	TotalNS uint64   `json:"total_ns"`
	Buckets []uint64 `json:"buckets"`
}

const callBucketsPerOctave = 4

// callTimesDiff is what happened between two snapshots, by method.
func callTimesDiff(before, after map[string]callTimes) map[string]callTimes {
	out := map[string]callTimes{}
	for m, a := range after {
		b := before[m]
		if a.Count <= b.Count {
			continue
		}
		d := callTimes{Count: a.Count - b.Count, TotalNS: a.TotalNS - b.TotalNS, Buckets: make([]uint64, len(a.Buckets))}
		for i := range a.Buckets {
			d.Buckets[i] = a.Buckets[i]
			if i < len(b.Buckets) {
				d.Buckets[i] -= b.Buckets[i]
			}
		}
		out[m] = d
	}
	return out
}

// bucketPercentile is the upper edge of the bucket that holds the p-th percentile
// (0 < p <= 100) of the calls: the p-th percentile is at most that.
func bucketPercentile(t callTimes, p float64) time.Duration {
	if t.Count == 0 {
		return 0
	}
	rank := uint64(math.Ceil(p / 100 * float64(t.Count)))
	var seen uint64
	for i, n := range t.Buckets {
		seen += n
		if seen >= rank {
			return time.Duration(math.Exp2(float64(i+1)/callBucketsPerOctave) * float64(time.Microsecond))
		}
	}
	return 0
}

// callTimesTable prints the calls of diff, the most time first: count, count per
// pod, mean, p50 and p99 bounds, and the summed time per pod.
func callTimesTable(title string, diff map[string]callTimes, pods int) string {
	methods := make([]string, 0, len(diff))
	var calls, total uint64
	for m, t := range diff {
		methods = append(methods, m)
		calls += t.Count
		total += t.TotalNS
	}
	slices.SortFunc(methods, func(a, b string) int {
		return cmp.Or(cmp.Compare(diff[b].TotalNS, diff[a].TotalNS), strings.Compare(a, b))
	})
	var out strings.Builder
	fmt.Fprintf(&out, "\n%s: %d unary calls to containerd, %.1f per pod, %.1f ms of call time per pod\n",
		title, calls, float64(calls)/float64(pods), float64(total)/1e6/float64(pods))
	fmt.Fprintf(&out, "%-58s %7s %8s %9s %9s %9s %12s\n", "method", "calls", "per pod", "mean ms", "p50 ≤ ms", "p99 ≤ ms", "ms per pod")
	for _, m := range methods {
		t := diff[m]
		fmt.Fprintf(&out, "%-58s %7d %8.2f %9.2f %9.2f %9.2f %12.2f\n", m, t.Count, float64(t.Count)/float64(pods),
			float64(t.TotalNS)/1e6/float64(t.Count), ms(bucketPercentile(t, 50)), ms(bucketPercentile(t, 99)),
			float64(t.TotalNS)/1e6/float64(pods))
	}
	return out.String()
}
