package bench

import (
	"bufio"
	"io"
	"strings"
	"time"
)

// podSeen is when a watch on the API server (the benchmark's own, through kubectl)
// first saw a pod, and first saw it bound to a node (spec.nodeName set).
type podSeen struct{ created, bound time.Time }

// watchArrivals reads the lines of `kubectl get pods -w --output-watch-events -o
// jsonpath='{.type} {.object.metadata.namespace}/{.object.metadata.name}
// {.object.spec.nodeName}{"\n"}'` as they come, stamping each with now(), until r
// ends; by "namespace/name".
func watchArrivals(r io.Reader, now func() time.Time) map[string]podSeen {
	out := map[string]podSeen{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		at := now()
		f := strings.Fields(sc.Text())
		if len(f) < 2 || (f[0] != "ADDED" && f[0] != "MODIFIED") || !strings.Contains(f[1], "/") {
			continue
		}
		s := out[f[1]]
		if s.created.IsZero() {
			s.created = at
		}
		if len(f) >= 3 && s.bound.IsZero() {
			s.bound = at
		}
		out[f[1]] = s
	}
	return out
}

// Two parts of "created → at the kubelet", from the benchmark's watch and the
// kubelet's log: the control plane's, until the pod was seen bound; the kubelet's,
// from then to its "SyncLoop ADD".
const (
	phaseBind    = "of it: seen created → seen bound (the test's watch)"
	phaseDeliver = "of it: seen bound → at the kubelet"
)

// arrivalPhases splits the pods' arrival with seen; pods missing from either side
// are left out.
func arrivalPhases(log string, seen map[string]podSeen) (map[string][]time.Duration, error) {
	out := map[string][]time.Duration{}
	done := map[string]bool{}
	for _, line := range strings.Split(log, "\n") {
		stamp, pods := apiAdd(line)
		for _, p := range pods {
			s, ok := seen[p]
			if !ok || done[p] || s.bound.IsZero() {
				continue
			}
			done[p] = true
			at, err := stamp.near(s.bound)
			if err != nil {
				return nil, err
			}
			out[phaseBind] = append(out[phaseBind], s.bound.Sub(s.created))
			out[phaseDeliver] = append(out[phaseDeliver], at.Sub(s.bound))
		}
	}
	return out, nil
}
