// Package bench compares pod sandbox lifecycle latency of shimd with that of
// containerd's own CRI plugin, on the same containerd, machine and CNI
// network. The benchmark itself needs root and the integration tools:
//
//	make bench
//
// which runs `go test -tags integration -run '^$' -bench . -benchtime 1x
// ./critest/bench/` and prints a table of per-RPC percentiles. This file
// holds the pure statistics, covered by plain `go test ./...`.
package bench

import (
	"math"
	"slices"
	"time"
)

// percentile returns the p-th percentile (0 < p <= 100) of samples by the
// nearest-rank method: the smallest sample such that at least p percent of
// the samples are less than or equal to it. It is always one of the samples.
// It returns 0 for no samples and does not modify samples.
func percentile(samples []time.Duration, p float64) time.Duration {
	if len(samples) == 0 {
		return 0
	}
	sorted := slices.Clone(samples)
	slices.Sort(sorted)
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

// ms converts d to fractional milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
