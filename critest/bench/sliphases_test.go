package bench

import (
	"testing"
	"time"
)

func TestSLIPhases(t *testing.T) {
	log := `I1129 15:30:11.467454    6889 kubelet.go:2760] "SyncLoop ADD" source="file" pods=[]
I1129 15:30:17.056154    6889 kubelet.go:2760] "SyncLoop ADD" source="api" pods=["default/a"]
I1129 15:30:17.500000    6889 kubelet.go:2760] "SyncLoop ADD" source="api" pods=["default/b","default/c"]
I1129 15:30:18.000000    6889 kubelet.go:2760] "SyncLoop ADD" source="api" pods=["default/a"]
I1129 15:30:19.000000    6889 kubelet.go:2788] "SyncLoop (PLEG): event for pod" pod="default/a" event={"ID":"u","Type":"ContainerStarted","Data":"sandbox"}
I1129 15:30:20.500000    6889 kubelet.go:2788] "SyncLoop (PLEG): event for pod" pod="default/a" event={"ID":"u","Type":"ContainerStarted","Data":"c"}
I1129 15:30:21.000000    6889 kubelet.go:2788] "SyncLoop (PLEG): event for pod" pod="default/c" event={"ID":"v","Type":"ContainerDied","Data":"x"}
I1129 15:30:22.000000    6889 kubelet.go:2788] "SyncLoop (PLEG): event for pod" pod="default/c" event={"ID":"v","Type":"ContainerStarted","Data":"c"}
I1129 15:30:23.000000    6889 kubelet.go:2788] "SyncLoop (PLEG): event for pod" pod="default/b" event={"ID":"w","Type":"ContainerStarted","Data":"c"}
I1129 15:30:30.000000    6889 kubelet.go:2788] "SyncLoop (PLEG): event for pod" pod="default/a" event={"ID":"u","Type":"ContainerStarted","Data":"restarted"}
I1129 15:30:25.409947    6889 pod_startup_latency_tracker.go:144] "Observed pod startup duration" pod="default/a" podStartSLOduration=8.409928509 podStartE2EDuration="8.409928509s" totalImagesPullingTime="0s" totalInitContainerRuntime="0s" isStatefulPod=false podCreationTimestamp="2026-11-29 15:30:17 +0000 UTC" imagePullSessionsCount=0 imagePullSessionsStartsCount=0 observedRunningTime="2026-11-29 15:30:25.385013208 +0000 UTC m=+14.341431999" watchObservedRunningTime="2026-11-29 15:30:25.409928509 +0000 UTC m=+14.366347300"
I1129 15:30:26.000000    6889 pod_startup_latency_tracker.go:144] "Observed pod startup duration" pod="default/c" podStartSLOduration=9 podStartE2EDuration="9s" totalImagesPullingTime="0s" totalInitContainerRuntime="0s" isStatefulPod=false podCreationTimestamp="2026-11-29 15:30:17 +0000 UTC" imagePullSessionsCount=0 imagePullSessionsStartsCount=0 observedRunningTime="2026-11-29 15:30:25.5 +0000 UTC m=+14.5" watchObservedRunningTime="2026-11-29 15:30:26 +0000 UTC m=+15"
I1129 15:30:27.000000    6889 pod_startup_latency_tracker.go:144] "Observed pod startup duration" pod="default/z" podStartSLOduration=9 podStartE2EDuration="9s" totalImagesPullingTime="0s" totalInitContainerRuntime="0s" isStatefulPod=false podCreationTimestamp="2026-11-29 15:30:17 +0000 UTC" imagePullSessionsCount=0 imagePullSessionsStartsCount=0 observedRunningTime="2026-11-29 15:30:25.5 +0000 UTC m=+14.5" watchObservedRunningTime="2026-11-29 15:30:26 +0000 UTC m=+15"
`
	got, err := sliPhases(log)
	if err != nil {
		t.Fatal(err)
	}
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	want := map[string][]time.Duration{
		// a: created 17.000, first ADD 17.056154 (the second is a resync), its
		// container started 20.5 (the event at 30 is after its status), status
		// written 25.385013208, watched 25.409928509; c: ADD 17.5, started 22,
		// written 25.5, watched 26; z was never added (the log began later); b
		// never ran.
		phaseSLI:          {ms(8409.928509), ms(9000)},
		phaseControlPlane: {ms(56.154), ms(500)},
		phaseNode:         {ms(3443.846), ms(4500)},
		phaseStatusWrite:  {ms(4885.013208), ms(3500)},
		phaseStatus:       {ms(24.915301), ms(500)},
	}
	for _, name := range sliPhaseNames {
		if len(got[name]) != len(want[name]) {
			t.Fatalf("%s: %v, want %v", name, got[name], want[name])
		}
		for i := range want[name] {
			if d := got[name][i] - want[name][i]; d < -time.Microsecond || d > time.Microsecond {
				t.Errorf("%s[%d] = %v, want %v", name, i, got[name][i], want[name][i])
			}
		}
	}
	// The three add up to the pod's SLI.
	if sum := got[phaseControlPlane][0] + got[phaseNode][0] + got[phaseStatusWrite][0] + got[phaseStatus][0]; sum != 8409928509*time.Nanosecond {
		t.Errorf("a's phases add up to %v, its SLI is 8.409928509s", sum)
	}
	if _, err := sliPhases(`I1129 15:30:25.4 1 x.go:1] "Observed pod startup duration" pod="default/a" podCreationTimestamp="yesterday"`); err == nil {
		t.Error("a time that does not parse was taken")
	}
}

func TestHousekeepingOverruns(t *testing.T) {
	log := `I1130 12:00:00.000000    1 kubelet.go:2790] "SyncLoop ADD" source="api" pods=["default/a"]
E1130 12:00:02.000000    1 kubelet.go:2860] "Housekeeping took longer than expected" err="housekeeping took too long" expected="1s" actual="1.25s"
E1130 12:00:05.000000    1 kubelet.go:2860] "Housekeeping took longer than expected" err="housekeeping took too long" expected="1s" actual="2.5s"
`
	n, total, err := housekeepingOverruns(log)
	if err != nil || n != 2 || total != 3750*time.Millisecond {
		t.Errorf("got %d, %v, %v; want 2, 3.75s, nil", n, total, err)
	}
	if _, _, err := housekeepingOverruns(`E1130 "Housekeeping took longer than expected" actual="soon"`); err == nil {
		t.Error("an unreadable duration read without error")
	}
}
