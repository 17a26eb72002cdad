package bench

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// histogram is one Prometheus histogram series: cumulative bucket counts by upper
// bound, and the count of observations.
type histogram struct {
	bounds []float64 // sorted, +Inf last
	counts []float64 // cumulative
	count  float64
	sum    float64 // of the observations
}

// parseHistograms reads the histograms named from Prometheus text exposition (buckets,
// count and sum). A series with an operation_type (the kubelet's), rpc (shimd's) or
// verb (client-go's) label is keyed name{LABEL=VALUE}, its other labels summed in; one
// without them by its name, all its series summed.
func parseHistograms(text string, names ...string) (map[string]histogram, error) {
	type acc struct{ buckets map[float64]float64 }
	accs := map[string]*acc{}
	counts, sums := map[string]float64{}, map[string]float64{}
	for _, line := range strings.Split(text, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		series, value, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.Fields(value)[0], 64)
		if err != nil {
			continue
		}
		metric, labels, _ := strings.Cut(strings.TrimSuffix(series, "}"), "{")
		for _, name := range names {
			switch metric {
			case name + "_bucket":
				key, le := histKey(name, labels)
				bound, err := strconv.ParseFloat(le, 64)
				if err != nil {
					return nil, fmt.Errorf("%s: le %q: %w", series, le, err)
				}
				if accs[key] == nil {
					accs[key] = &acc{buckets: map[float64]float64{}}
				}
				accs[key].buckets[bound] += v
			case name + "_count":
				key, _ := histKey(name, labels)
				counts[key] += v
			case name + "_sum":
				key, _ := histKey(name, labels)
				sums[key] += v
			}
		}
	}
	out := map[string]histogram{}
	for key, a := range accs {
		h := histogram{count: counts[key], sum: sums[key]}
		for bound := range a.buckets {
			h.bounds = append(h.bounds, bound)
		}
		sort.Float64s(h.bounds)
		for _, bound := range h.bounds {
			h.counts = append(h.counts, a.buckets[bound])
		}
		out[key] = h
	}
	return out, nil
}

// histKey is the series' key and its le label.
func histKey(name, labels string) (key, le string) {
	var op string
	for _, l := range strings.Split(labels, ",") {
		k, v, _ := strings.Cut(l, "=")
		v = strings.Trim(v, `"`)
		switch k {
		case "le":
			le = v
		case "operation_type", "rpc", "verb":
			op = k + "=" + v
		}
	}
	if op != "" {
		return name + "{" + op + "}", le
	}
	return name, le
}

// quantile estimates the q-quantile as Prometheus' histogram_quantile does: linear
// interpolation inside the bucket that holds it (from 0 for the first bucket); the
// largest finite bound when it falls into +Inf. NaN without observations.
func (h histogram) quantile(q float64) float64 {
	if h.count == 0 || len(h.bounds) == 0 {
		return math.NaN()
	}
	rank := q * h.count
	for i, bound := range h.bounds {
		if h.counts[i] < rank {
			continue
		}
		if math.IsInf(bound, 1) {
			if i == 0 {
				return math.NaN()
			}
			return h.bounds[i-1]
		}
		lower, below := 0.0, 0.0
		if i > 0 {
			lower, below = h.bounds[i-1], h.counts[i-1]
		}
		in := h.counts[i] - below
		if in == 0 {
			return bound
		}
		return lower + (bound-lower)*(rank-below)/in
	}
	return h.bounds[len(h.bounds)-1]
}

// cell formats the q-quantile in seconds or milliseconds with its sample count, or
// "max of N" style wording when too few observations back it.
func (h histogram) cell(q float64) string {
	v := h.quantile(q)
	if math.IsNaN(v) {
		return "no samples"
	}
	s := fmt.Sprintf("%.3f s", v)
	if v < 1 {
		s = fmt.Sprintf("%.1f ms", v*1000)
	}
	n := int(h.count)
	if float64(n) < math.Ceil(1/(1-q)-1e-9) {
		return fmt.Sprintf("%s (only %d samples: ~max)", s, n)
	}
	return fmt.Sprintf("%s (n=%d)", s, n)
}
