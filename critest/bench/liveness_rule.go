package bench

import (
	"fmt"
	"time"
)

// The kubelet's crash-loop back-off for a container its liveness probe kills
// (pkg/kubelet/kuberuntime doBackOff with client-go's flowcontrol.Backoff, kubelet
// v1.34 and v1.37 alike): in the sync that kills the unhealthy attempt, it looks
// for the newest attempt of that container that had already exited. None: it
// restarts at once. Otherwise, if its back-off entry exists and that attempt ended
// less than the entry's back-off ago, it waits, and a later sync restarts once the
// attempt just killed has been over for the back-off; else it restarts at once.
// Either way the restart doubles the entry (10 s first).

// attempt is one run of the container, as the runtime reports it.
type attempt struct {
	n                 uint32
	started, finished time.Time
}

// The kubelet's rule, as judgeRestarts applies it.
const (
	ruleAtOnce  = "at once"
	ruleBackOff = "back-off"
	// ruleUnsure: since is within backoffSlack of the back-off, where the kill's exact
	// moment (before the attempt's end by the stop's length) decides.
	ruleUnsure = "unsure"
)

// backoffSlack is how far the kill may come before the killed attempt's finished_at
// (the TERM trap exits at once) plus the kubelet's own lag.
const backoffSlack = time.Second

// restartJudged is one restart and what the kubelet's rule says of it.
type restartJudged struct {
	since   time.Duration // newest exited attempt's end to the kill; -1: none had exited
	backoff time.Duration // the kubelet's back-off when it judged; 0: none yet
	rule    string
	delay   time.Duration // the killed attempt's end to the next attempt's start
}

func fmtSince(r restartJudged) string {
	if r.since < 0 {
		return "none"
	}
	return r.since.Round(10 * time.Millisecond).String()
}

// check compares the restart with the rule: at once is a new start within
// atOnceMax of the kill; a back-off waits for it.
func (r restartJudged) check() error {
	switch r.rule {
	case ruleAtOnce:
		if r.delay > atOnceMax {
			return fmt.Errorf("the kubelet's rule restarts at once (since %s, back-off %s), yet it came %s after the kill", r.since, r.backoff, r.delay)
		}
	case ruleBackOff:
		if r.delay < r.backoff-backoffSlack {
			return fmt.Errorf("came %s after the kill although the kubelet's back-off was %s (since %s): the kubelet did not see the newest exited attempt as the runtime reports it", r.delay, r.backoff, r.since)
		}
	}
	return nil
}

// atOnceMax bounds a restart at once: the container's create and start, and the
// kubelet's sync after the kill.
const atOnceMax = 5 * time.Second

// kubeletInitialBackoff is the kubelet's first crash-loop back-off.
const kubeletInitialBackoff = 10 * time.Second

// judgeRestarts applies the kubelet's rule to attempts (in order, attempt k+1 the
// restart after attempt k's kill): restart k is judged at attempt k's kill (its
// finished_at) from attempt k-1's finished_at.
func judgeRestarts(attempts []attempt) []restartJudged {
	var out []restartJudged
	var backoff time.Duration // 0: the kubelet has no back-off entry yet
	for k := 0; k+1 < len(attempts); k++ {
		r := restartJudged{since: -1, backoff: backoff, delay: attempts[k+1].started.Sub(attempts[k].finished)}
		if k > 0 {
			r.since = attempts[k].finished.Sub(attempts[k-1].finished)
		}
		switch {
		case r.since < 0:
			r.rule = ruleAtOnce // no exited attempt: no back-off, no Next
			out = append(out, r)
			continue
		case backoff > 0 && r.since < backoff-backoffSlack:
			r.rule = ruleBackOff
		case backoff > 0 && r.since < backoff+backoffSlack:
			r.rule = ruleUnsure
		default:
			r.rule = ruleAtOnce
		}
		// Next: at once now, or once the back-off is over.
		if backoff == 0 {
			backoff = kubeletInitialBackoff
		} else {
			backoff *= 2
		}
		out = append(out, r)
	}
	return out
}
