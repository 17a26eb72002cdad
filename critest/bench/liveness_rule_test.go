package bench

import (
	"testing"
	"time"
)

// attemptsAt builds attempts from (start, end) offsets in seconds.
func attemptsAt(t0 time.Time, se ...[2]float64) []attempt {
	var out []attempt
	for i, p := range se {
		out = append(out, attempt{n: uint32(i), started: t0.Add(time.Duration(p[0] * float64(time.Second))), finished: t0.Add(time.Duration(p[1] * float64(time.Second)))})
	}
	return out
}

func TestJudgeRestarts(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	// Probe failing after 6 s; restarts 1 and 2 at once, 3 after 10 s; attempt 3 ends
	// 21 s after attempt 2 (10 s back-off, 5 s requeue, 6 s probe): past the 20 s
	// back-off, so restart 4 is at once; restart 5 judged against 40 s.
	got := judgeRestarts(attemptsAt(t0,
		[2]float64{0, 6}, [2]float64{6.5, 12.5}, [2]float64{13, 19}, [2]float64{34, 40}, [2]float64{40.5, 46.5}, [2]float64{87, 93}))
	want := []struct {
		rule    string
		backoff time.Duration
	}{{ruleAtOnce, 0}, {ruleAtOnce, 0}, {ruleBackOff, 10 * time.Second}, {ruleAtOnce, 20 * time.Second}, {ruleBackOff, 40 * time.Second}}
	if len(got) != len(want) {
		t.Fatalf("%d restarts judged, want %d", len(got), len(want))
	}
	for i, w := range want {
		if got[i].rule != w.rule || got[i].backoff != w.backoff {
			t.Errorf("restart %d: %s with back-off %s, want %s with %s", i+1, got[i].rule, got[i].backoff, w.rule, w.backoff)
		}
		if err := got[i].check(); err != nil {
			t.Errorf("restart %d: %v", i+1, err)
		}
	}
	if got[0].since >= 0 || got[3].since != 21*time.Second {
		t.Errorf("since: restart 1 %s (want none), restart 4 %s (want 21s)", got[0].since, got[3].since)
	}

	// The irregular restart of issue 32 where the rule says back-off: check fails.
	bad := judgeRestarts(attemptsAt(t0,
		[2]float64{0, 6}, [2]float64{6.5, 12.5}, [2]float64{13, 19}, [2]float64{30, 36}, [2]float64{36.5, 42.5}))
	if bad[3].rule != ruleBackOff {
		t.Fatalf("restart 4 (since 17 s, back-off 20 s): %s, want %s", bad[3].rule, ruleBackOff)
	}
	if err := bad[3].check(); err == nil {
		t.Error("a restart 0.5 s after the kill passed although the back-off was 20 s")
	}
	// Near the back-off the kill's own moment decides: not judged.
	near := judgeRestarts(attemptsAt(t0,
		[2]float64{0, 6}, [2]float64{6.5, 12.5}, [2]float64{13, 19}, [2]float64{33, 39.5}, [2]float64{40, 46}))
	if near[3].rule != ruleUnsure || near[3].check() != nil {
		t.Errorf("restart 4 (since 20.5 s, back-off 20 s): %s, want %s and no error", near[3].rule, ruleUnsure)
	}
	// A restart at once that took too long is an error too.
	slow := restartJudged{since: 25 * time.Second, backoff: 20 * time.Second, rule: ruleAtOnce, delay: 15 * time.Second}
	if slow.check() == nil {
		t.Error("a restart 15 s after the kill passed as at once")
	}
}
