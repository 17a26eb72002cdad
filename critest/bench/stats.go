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
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
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

// stepSamples reads shimd's log lines whose message is one of msgs and that carry a
// steps="name=duration ..." field (the per-step timing shimd logs for RunPodSandbox,
// CreateContainer and StartContainer), and returns the durations per "msg: step", in
// the order the steps first appear. Tokens without "=" (a mode's name) are skipped.
func stepSamples(logText string, msgs ...string) (map[string][]time.Duration, []string) {
	samples := map[string][]time.Duration{}
	var order []string
	for _, line := range strings.Split(logText, "\n") {
		msg := logField(line, "msg")
		if !slices.Contains(msgs, msg) {
			continue
		}
		for _, tok := range strings.Fields(logField(line, "steps")) {
			name, val, ok := strings.Cut(tok, "=")
			d, err := time.ParseDuration(val)
			if !ok || err != nil {
				continue
			}
			key := msg + ": " + name
			if _, seen := samples[key]; !seen {
				order = append(order, key)
			}
			samples[key] = append(samples[key], d)
		}
	}
	return samples, order
}

// logField is the value of field key in a logrus text line or a klog structured one
// (key=value or key="quoted value"); "" if absent.
func logField(line, key string) string {
	i := strings.Index(" "+line, " "+key+"=")
	if i < 0 {
		return ""
	}
	rest := line[i+len(key)+1:]
	if strings.HasPrefix(rest, `"`) {
		if v, err := strconv.QuotedPrefix(rest); err == nil {
			s, _ := strconv.Unquote(v)
			return s
		}
		return ""
	}
	v, _, _ := strings.Cut(rest, " ")
	return v
}

// parseCounts parses a comma-separated list of positive integers, such as POLL_PODS
// ("110,250").
func parseCounts(v string) ([]int, error) {
	var ns []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q: want positive integers separated by commas", v)
		}
		ns = append(ns, n)
	}
	return ns, nil
}

// pctCell formats the p-th percentile of samples with what it rests on: "12.3 ms
// (n=150)" when there are enough samples for that percentile to differ from the
// maximum (at least 100/(100-p): 2 for a p50, 10 for a p90, 100 for a p99), else
// "max of 3: 12.3 ms", so that no table calls the largest of a few samples a p99.
func pctCell(samples []time.Duration, p float64) string {
	n := len(samples)
	if n == 0 {
		return "no samples"
	}
	v := ms(percentile(samples, p))
	if float64(n) < math.Ceil(100/(100-p)-1e-9) {
		return fmt.Sprintf("max of %d: %.1f ms", n, v)
	}
	return fmt.Sprintf("%.1f ms (n=%d)", v, n)
}

// turns is the order in which sides go in round i: the list rotated by i, so that
// each side goes first in turn and none always runs on a machine the other warmed.
func turns[T any](sides []T, i int) []T {
	out := make([]T, 0, len(sides))
	for j := range sides {
		out = append(out, sides[(i+j)%len(sides)])
	}
	return out
}
