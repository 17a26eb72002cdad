//go:build integration

package kubelet

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shimd/shimd/critest/harness"
)

// Step 4: the kubelet rotates the logger's log (containerLogMaxSize 1Mi,
// containerLogMaxFiles 3) and shimd reopens it: rotated files exist, no line
// is lost or doubled across rotations, and /containerLogs keeps returning
// the newest lines.
func (s *e2e) stepLogs(t *testing.T) {
	Eventually(t, 3*time.Minute, "logger running", func() error {
		p, err := s.k.Pod("logger")
		if err != nil {
			return err
		}
		return running(p, false, "logger")
	})
	took := Eventually(t, 3*time.Minute, "logger done printing, seen through /containerLogs", func() error {
		out, err := s.k.ContainerLogs("logger", "logger", LogOptions{TailLines: 5})
		if err != nil {
			return err
		}
		if !strings.Contains(out, "tick ") {
			return fmt.Errorf("last lines: %q", trim(out, 300))
		}
		return nil
	})
	t.Logf("logger printed %d lines and ticks after %s", loggerLines, took)

	var files []string
	Eventually(t, time.Minute, "rotated log files, at most containerLogMaxFiles=3 in all", func() error {
		var err error
		files, err = filepath.Glob(filepath.Join(s.k.PodLogsDir, Namespace+"_"+s.k.MirrorName("logger")+"_*", "logger", "*"))
		if err != nil {
			return err
		}
		var rotated int
		for _, f := range files {
			if strings.Contains(filepath.Base(f), ".log.") {
				rotated++
			}
		}
		if rotated == 0 || len(files) > 3 {
			return fmt.Errorf("files %v", files)
		}
		return nil
	})
	t.Logf("log files: %v", baseNames(files))
	if err := checkLogContinuity(files); err != nil {
		harness.Errorf(t, "log lines across rotations: %v", err)
	}

	// /containerLogs returns the newest ticks, from the file shimd reopened.
	first, err := lastTick(s.k, "logger")
	if err != nil {
		t.Fatal(err)
	}
	Eventually(t, 30*time.Second, "a newer tick in /containerLogs", func() error {
		n, err := lastTick(s.k, "logger")
		if err != nil {
			return err
		}
		if n <= first {
			return fmt.Errorf("last tick still %d", n)
		}
		return nil
	})
	if out, err := s.k.ContainerLogs("logger", "logger", LogOptions{}); err != nil || strings.Contains(out, "line 1 ") {
		harness.Errorf(t, "whole /containerLogs should start after the rotated lines (err %v), starts with %q", err, trim(out, 200))
	}
}

// Step 5: exec (SPDY and WebSocket, with stdin, stderr, exit code; a TTY)
// and port-forward through the kubelet, which proxies to shimd's streaming
// server.
func (s *e2e) stepStreaming(t *testing.T) {
	script := `echo out-$((6*7)); echo err-line >&2; read x; echo got-$x; exit 3`
	for _, tr := range []Transport{SPDY, WebSocket} {
		t.Run("exec_"+string(tr), func(t *testing.T) {
			start := time.Now()
			res, err := s.k.Exec(ctxT(t, time.Minute), ExecRequest{
				Pod: "web", Container: "web", Command: []string{"sh", "-c", script}, Stdin: "hello\n", Transport: tr,
			})
			if err != nil {
				harness.Fatalf(t, "exec: %v (stdout %q, stderr %q)", err, res.Stdout, res.Stderr)
			}
			if res.Stdout != "out-42\ngot-hello\n" || res.Stderr != "err-line\n" || res.ExitCode != 3 {
				harness.Errorf(t, "exec: stdout %q, stderr %q, exit %d; want \"out-42\\ngot-hello\\n\", \"err-line\\n\", 3",
					res.Stdout, res.Stderr, res.ExitCode)
			}
			t.Logf("exec over %s took %s", tr, time.Since(start).Round(time.Millisecond))
		})
	}
	t.Run("exec_tty", func(t *testing.T) {
		res, err := s.k.Exec(ctxT(t, time.Minute), ExecRequest{Pod: "web", Container: "web", Command: []string{"tty"}, TTY: true})
		if err != nil || !strings.Contains(res.Stdout, "/dev/pts/") {
			harness.Errorf(t, "exec tty: %q, %v; want /dev/pts/N", res.Stdout, err)
		}
	})
	t.Run("portforward", func(t *testing.T) {
		local, stop, err := s.k.PortForward("web", 80)
		if err != nil {
			harness.Fatalf(t, "port-forward: %v", err)
		}
		defer stop()
		for i := 0; i < 3; i++ { // each connection is a new stream pair
			code, body, err := httpGet(ctxT(t, 30*time.Second), fmt.Sprintf("http://127.0.0.1:%d/", local))
			if err != nil || code != 200 {
				harness.Fatalf(t, "GET through port-forward #%d: %d %q, %v", i, code, trim(body, 200), err)
			}
		}
	})
}
