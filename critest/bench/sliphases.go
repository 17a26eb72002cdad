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
	added := map[string]klogStamp{}     // each pod's first ADD
	started := map[string][]klogStamp{} // its PLEG ContainerStarted events
	type observed struct {
		pod                       string
		created, running, watched time.Time
		sli                       time.Duration
	}
	var seen []observed
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(make([]byte, 0, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.Contains(line, `"SyncLoop ADD"`):
			at, pods := apiAdd(line)
			for _, p := range pods {
				if _, dup := added[p]; !dup {
					added[p] = at
				}
			}
		case strings.Contains(line, `"SyncLoop (PLEG): event for pod"`) && strings.Contains(line, `"Type":"ContainerStarted"`):
			at, ok := stampOf(line)
			if pod := logField(line, "pod"); ok && pod != "" {
				started[pod] = append(started[pod], at)
			}
		case strings.Contains(line, `"Observed pod startup duration"`):
			o := observed{pod: logField(line, "pod")}
			if o.pod == "" {
				continue
			}
			for _, f := range []struct {
				name string
				to   *time.Time
			}{{"podCreationTimestamp", &o.created}, {"observedRunningTime", &o.running}, {"watchObservedRunningTime", &o.watched}} {
				t, err := goTime(logField(line, f.name))
				if err != nil {
					return nil, fmt.Errorf("%s in %q: %w", f.name, line, err)
				}
				*f.to = t
			}
			secs, err := strconv.ParseFloat(logField(line, "podStartSLOduration"), 64)
			if err != nil {
				return nil, fmt.Errorf("podStartSLOduration in %q: %w", line, err)
			}
			o.sli = time.Duration(secs * float64(time.Second))
			seen = append(seen, o)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	out := map[string][]time.Duration{}
	for _, s := range seen {
		stamp, ok := added[s.pod]
		if !ok {
			continue
		}
		at, err := stamp.near(s.running)
		if err != nil {
			return nil, fmt.Errorf("SyncLoop ADD of %s: %w", s.pod, err)
		}
		var last time.Time
		for _, st := range started[s.pod] {
			t, err := st.near(s.running)
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

// klogHeaderRE: a klog header's date (MMDD) and time of day.
var klogHeaderRE = regexp.MustCompile(`^I(\d{4}) (\d{2}:\d{2}:\d{2}\.\d+)\s`)

// klogStamp is a klog header's time: its date has no year.
type klogStamp struct{ mmdd, clock string }

func stampOf(line string) (klogStamp, bool) {
	m := klogHeaderRE.FindStringSubmatch(line)
	if m == nil {
		return klogStamp{}, false
	}
	return klogStamp{m[1], m[2]}, true
}

// near reads the stamp in the year and zone of near, a time the kubelet wrote in the
// same minutes (klog writes its local time).
func (k klogStamp) near(near time.Time) (time.Time, error) {
	t, err := time.ParseInLocation("2006 0102 15:04:05.999999", fmt.Sprintf("%d %s %s", near.Year(), k.mmdd, k.clock), near.Location())
	if err == nil && t.Sub(near) > 180*24*time.Hour { // near is in January, the stamp in December
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

// apiAdd is the stamp and the pods of a kubelet's "SyncLoop ADD" line from the API
// server; no pods for any other line.
func apiAdd(line string) (klogStamp, []string) {
	if !strings.Contains(line, `"SyncLoop ADD"`) || logField(line, "source") != "api" {
		return klogStamp{}, nil
	}
	at, ok := stampOf(line)
	if !ok {
		return klogStamp{}, nil
	}
	var pods []string
	for _, p := range strings.Split(strings.Trim(logField(line, "pods"), "[]"), ",") {
		if p = strings.Trim(p, `"`); p != "" {
			pods = append(pods, p)
		}
	}
	return at, pods
}

// housekeepingOverruns reads a kubelet log's "Housekeeping took longer than
// expected" errors (each housekeeping over 1 s, logged at every level): how many and
// how long in all. Housekeeping (HandlePodCleanups, which lists the runtime's pods)
// runs in the kubelet's sync loop, so while it runs no pod is added ("SyncLoop ADD")
// and no PLEG event is handled.
func housekeepingOverruns(log string) (n int, total time.Duration, err error) {
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, `"Housekeeping took longer than expected"`) {
			continue
		}
		d, err := time.ParseDuration(logField(line, "actual"))
		if err != nil {
			return 0, 0, fmt.Errorf("housekeeping line %q: %w", line, err)
		}
		n, total = n+1, total+d
	}
	return n, total, nil
}
