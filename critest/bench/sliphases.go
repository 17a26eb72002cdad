package bench

import (
	"bufio"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// sliPhases splits each pod's start SLI (kubelet_pod_start_sli_duration_seconds,
// from the pod's creation in the API to the kubelet seeing it running on its watch)
// into four parts, from a kubelet's log at --v=2:
//
//   - "created → at the kubelet": podCreationTimestamp (whole seconds, so up to 1 s
//     too long) to the kubelet's "SyncLoop ADD" of the pod: the controllers, the
//     scheduler and the API server;
//   - "at the kubelet → started": to the PLEG's last ContainerStarted event of the
//     pod before the status below: the kubelet's sync of the pod (volumes, the
//     runtime's RunPodSandbox, CreateContainer and StartContainer) and the PLEG's
//     relist that saw the container run, the only part the runtime is in;
//   - "started → status written": to observedRunningTime, when the kubelet's status
//     manager had written a status with every container started to the API server
//     (it writes one pod's status at a time, a GET and a PATCH each);
//   - "written → seen on the watch": to watchObservedRunningTime, when that status
//     came back on the kubelet's watch.
//
// The four add up to the SLI of a pod that pulled nothing. Pods without the three
// lines (not started, or added before the log began) are left out. phaseSLI holds
// each pod's SLI as the kubelet logged it (podStartSLOduration, the value its
// histogram counts): exact, where the histogram's buckets are 10 s wide between 10
// and 20 s and 30 s.
func sliPhases(log string) (map[string][]time.Duration, error) {
	added := map[string][2]string{}     // a pod's first ADD: klog's MMDD and time of day
	started := map[string][][2]string{} // its PLEG ContainerStarted events
	type observed struct {
		created, running, watched time.Time
		sli                       time.Duration
	}
	var seen []struct {
		pod string
		observed
	}
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(make([]byte, 0, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.Contains(line, `"SyncLoop ADD"`) && strings.Contains(line, `source="api"`):
			m := syncAddRE.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			for _, p := range strings.Split(m[3], ",") {
				p = strings.Trim(strings.TrimSpace(p), `"`)
				if _, dup := added[p]; p != "" && !dup {
					added[p] = [2]string{m[1], m[2]}
				}
			}
		case strings.Contains(line, `"SyncLoop (PLEG): event for pod"`) && strings.Contains(line, `"Type":"ContainerStarted"`):
			m := klogHeaderRE.FindStringSubmatch(line)
			pod, ok := field(line, "pod")
			if m == nil || !ok {
				continue
			}
			started[pod] = append(started[pod], [2]string{m[1], m[2]})
		case strings.Contains(line, `"Observed pod startup duration"`):
			pod, ok := field(line, "pod")
			if !ok {
				continue
			}
			var o observed
			for _, f := range []struct {
				name string
				to   *time.Time
			}{{"podCreationTimestamp", &o.created}, {"observedRunningTime", &o.running}, {"watchObservedRunningTime", &o.watched}} {
				v, ok := field(line, f.name)
				if !ok {
					return nil, fmt.Errorf("no %s in %q", f.name, line)
				}
				t, err := goTime(v)
				if err != nil {
					return nil, fmt.Errorf("%s in %q: %w", f.name, line, err)
				}
				*f.to = t
			}
			v, ok := unquotedField(line, "podStartSLOduration")
			if !ok {
				return nil, fmt.Errorf("no podStartSLOduration in %q", line)
			}
			secs, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return nil, fmt.Errorf("podStartSLOduration in %q: %w", line, err)
			}
			o.sli = time.Duration(secs * float64(time.Second))
			seen = append(seen, struct {
				pod string
				observed
			}{pod, o})
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	out := map[string][]time.Duration{}
	for _, s := range seen {
		hdr, ok := added[s.pod]
		if !ok {
			continue
		}
		at, err := klogTime(s.running, hdr[0], hdr[1])
		if err != nil {
			return nil, fmt.Errorf("SyncLoop ADD of %s: %w", s.pod, err)
		}
		var last time.Time
		for _, h := range started[s.pod] {
			t, err := klogTime(s.running, h[0], h[1])
			if err != nil {
				return nil, fmt.Errorf("PLEG event of %s: %w", s.pod, err)
			}
			if !t.After(s.running) && t.After(last) {
				last = t
			}
		}
		if last.IsZero() {
			continue
		}
		out[phaseSLI] = append(out[phaseSLI], s.sli)
		out[phaseControlPlane] = append(out[phaseControlPlane], at.Sub(s.created))
		out[phaseNode] = append(out[phaseNode], last.Sub(at))
		out[phaseStatusWrite] = append(out[phaseStatusWrite], s.running.Sub(last))
		out[phaseStatus] = append(out[phaseStatus], s.watched.Sub(s.running))
	}
	return out, nil
}

const (
	phaseSLI          = "the SLI, each pod's from the kubelet's log"
	phaseControlPlane = "created → at the kubelet"
	phaseNode         = "at the kubelet → started"
	phaseStatusWrite  = "started → status written"
	phaseStatus       = "written → seen on the watch"
)

var sliPhaseNames = []string{phaseSLI, phaseControlPlane, phaseNode, phaseStatusWrite, phaseStatus}

var (
	// syncAddRE: a klog header's date and time, and the pods of a "SyncLoop ADD".
	syncAddRE = regexp.MustCompile(`^I(\d{4}) (\d{2}:\d{2}:\d{2}\.\d+)\s.*"SyncLoop ADD".*pods=\[([^\]]*)\]`)
	// klogHeaderRE: a klog header's date and time.
	klogHeaderRE = regexp.MustCompile(`^I(\d{4}) (\d{2}:\d{2}:\d{2}\.\d+)\s`)
)

// klogTime reads a klog header's MMDD and time of day, in the year and zone of near,
// a time the kubelet wrote in the same minutes (klog writes its local time).
func klogTime(near time.Time, mmdd, clock string) (time.Time, error) {
	t, err := time.ParseInLocation("2006 0102 15:04:05.999999", fmt.Sprintf("%d %s %s", near.Year(), mmdd, clock), near.Location())
	if err == nil && t.Sub(near) > 180*24*time.Hour { // near is in January, the ADD in December
		t = t.AddDate(-1, 0, 0)
	}
	return t, err
}

// goTime reads a time.Time as its String method writes it, without the monotonic
// reading ("2026-11-29 15:30:25.385013208 +0000 UTC m=+14.34").
func goTime(s string) (time.Time, error) {
	s, _, _ = strings.Cut(s, " m=")
	return time.Parse("2006-01-02 15:04:05.999999999 -0700 MST", s)
}

// unquotedField returns the value of key=... (up to the next space) in a klog
// structured line.
func unquotedField(line, key string) (string, bool) {
	i := strings.Index(line, " "+key+"=")
	if i < 0 {
		return "", false
	}
	rest := line[i+len(key)+2:]
	if j := strings.IndexByte(rest, ' '); j >= 0 {
		rest = rest[:j]
	}
	return rest, rest != ""
}

// field returns the quoted value of key="..." in a klog structured line.
func field(line, key string) (string, bool) {
	i := strings.Index(line, " "+key+`="`)
	if i < 0 {
		return "", false
	}
	rest := line[i+len(key)+3:]
	j := strings.IndexByte(rest, '"')
	if j < 0 {
		return "", false
	}
	return rest[:j], true
}
