//go:build integration

package kubelet

import (
	"bufio"
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// follower reads a `logs -f` stream of a ticker pod and opens it again when
// it ends.
type follower struct {
	pod  string
	done chan struct{}

	mu sync.Mutex
	st followState
}

type followState struct {
	connects int
	breaks   []string // why each stream ended
	last     int      // the newest tick seen
	lastAt   time.Time
}

func followLogs(ctx context.Context, k *Kubelet, pod string) *follower {
	f := &follower{pod: pod, done: make(chan struct{})}
	go func() {
		defer close(f.done)
		for ctx.Err() == nil {
			rc, err := k.FollowLogs(ctx, pod, "logger", 1)
			if err == nil {
				f.update(func(st *followState) { st.connects++ })
				sc := bufio.NewScanner(rc)
				for sc.Scan() {
					if m := tickRE.FindStringSubmatch(sc.Text()); m != nil {
						n, _ := strconv.Atoi(m[1])
						f.update(func(st *followState) { st.last, st.lastAt = n, time.Now() })
					}
				}
				err = sc.Err()
				rc.Close()
			}
			if ctx.Err() != nil {
				return
			}
			f.update(func(st *followState) {
				st.breaks = append(st.breaks, fmt.Sprintf("%s: %v", time.Now().Format(time.StampMilli), err))
			})
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}()
	return f
}

func (f *follower) update(fn func(*followState)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(&f.st)
}

func (f *follower) state() followState {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.st
	st.breaks = append([]string(nil), st.breaks...)
	return st
}

func (f *follower) wait() { <-f.done }

// podWatcher polls the kubelet's /pods every second and remembers the first
// difference from a snapshot.
type podWatcher struct {
	done chan struct{}

	mu          sync.Mutex
	polls, errs int
	deviation   string
}

func watchPods(ctx context.Context, s *e2e, before map[string]podSnapshot) *podWatcher {
	w := &podWatcher{done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			pods, err := s.k.Pods()
			w.mu.Lock()
			w.polls++
			switch {
			case err != nil:
				w.errs++
			case w.deviation == "":
				if d := s.diffPods(pods, before); d != nil {
					w.deviation = time.Now().Format(time.StampMilli) + ": " + d.Error()
				}
			}
			w.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
	}()
	return w
}

func (w *podWatcher) wait() { <-w.done }

func (w *podWatcher) result() (polls, errs int, deviation string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.polls, w.errs, w.deviation
}

// checkTicks reads a ticker pod's CRI log file(s) and checks that its ticks
// run from 1 with no gap or repeat: no line was lost or doubled.
func checkTicks(k *Kubelet, pod string) error {
	files, err := filepath.Glob(filepath.Join(k.PodLogsDir, Namespace+"_"+k.MirrorName(pod)+"_*", "logger", "*"))
	if err != nil || len(files) == 0 {
		return fmt.Errorf("no log files (%v)", err)
	}
	if len(files) != 1 {
		return fmt.Errorf("log files %v, want one (no rotation at this size)", baseNames(files))
	}
	last := 0
	err = readCRILog(files[0], func(msg string) error {
		n, err := strconv.Atoi(strings.TrimPrefix(msg, "tick "))
		if err != nil || !strings.HasPrefix(msg, "tick ") {
			return fmt.Errorf("unexpected line %q", trim(msg, 100))
		}
		if n != last+1 {
			return fmt.Errorf("tick %d follows tick %d", n, last)
		}
		last = n
		return nil
	})
	if err == nil && last == 0 {
		err = fmt.Errorf("no ticks in %s", files[0])
	}
	return err
}
