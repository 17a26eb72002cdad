package harness

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"
)

// stopGrace is how long a daemon gets between SIGTERM and SIGKILL.
const stopGrace = 10 * time.Second

// daemon is one background process that the harness started. It is only
// ever signalled by its own PID.
type daemon struct {
	name    string // for messages: "containerd", "shimd"
	path    string
	args    []string
	env     []string // nil: inherit
	logPath string
	// wrap is a command line the daemon runs under ("nsenter -t PID -m -n
	// --", which execs it in place, so the PID is the daemon's); nil: none.
	wrap []string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has been waited for
	err  error         // wait result, valid after done
}

// start launches the process with stdout and stderr appended to logPath.
func (d *daemon) start() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cmd != nil && !isClosed(d.done) {
		return fmt.Errorf("%s is already running as pid %d", d.name, d.cmd.Process.Pid)
	}
	logf, err := os.OpenFile(d.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(logf, "\n===== harness: %s starting at %s: %s %q\n",
		d.name, time.Now().Format(time.RFC3339Nano), d.path, d.args)
	cmd := exec.Command(d.path, d.args...)
	if len(d.wrap) > 0 {
		cmd = exec.Command(d.wrap[0], append(append(append([]string{}, d.wrap[1:]...), d.path), d.args...)...)
	}
	cmd.Env = d.env
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// Own process group: a ^C to "go test" does not reach it first,
		// and if the test binary dies the daemon is told to shut down.
		Setpgid:   true,
		Pdeathsig: syscall.SIGTERM,
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", d.name, err)
	}
	done := make(chan struct{})
	d.cmd, d.done, d.err = cmd, done, nil
	go func() {
		err := cmd.Wait()
		logf.Close()
		d.mu.Lock()
		d.err = err
		d.mu.Unlock()
		close(done)
	}()
	return nil
}

func isClosed(c chan struct{}) bool {
	if c == nil {
		return true
	}
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// pid returns the PID of the running process, or 0.
func (d *daemon) pid() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cmd == nil || isClosed(d.done) {
		return 0
	}
	return d.cmd.Process.Pid
}

// started tells whether the process was ever started.
func (d *daemon) started() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cmd != nil
}

// exited returns a channel closed when the current process has exited.
func (d *daemon) exited() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.done == nil {
		c := make(chan struct{})
		close(c)
		return c
	}
	return d.done
}

// exitErr is the result of Wait once the process has exited.
func (d *daemon) exitErr() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.err
}

// signal sends sig to the process by PID and waits up to timeout for it to
// exit. A zero timeout waits forever. It returns whether the process exited.
func (d *daemon) signal(sig syscall.Signal, timeout time.Duration) bool {
	d.mu.Lock()
	cmd, done := d.cmd, d.done
	d.mu.Unlock()
	if cmd == nil || isClosed(done) {
		return true
	}
	if err := cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return isClosed(done)
	}
	if timeout == 0 {
		<-done
		return true
	}
	select {
	case <-done:
		return true
	case <-time.After(timeout):
		return false
	}
}

// stop sends SIGTERM, then SIGKILL after stopGrace, and waits. It reports
// whether SIGKILL was needed.
func (d *daemon) stop() (killed bool) {
	if d.signal(syscall.SIGTERM, stopGrace) {
		return false
	}
	d.signal(syscall.SIGKILL, 0)
	return true
}

// kill sends SIGKILL and waits.
func (d *daemon) kill() { d.signal(syscall.SIGKILL, 0) }

// setWrap sets the command line the daemon runs under from its next start.
func (d *daemon) setWrap(wrap []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.wrap = wrap
}

// logTail returns the last n lines of the daemon's log.
func (d *daemon) logTail(n int) string {
	b, err := os.ReadFile(d.logPath)
	if err != nil {
		return err.Error()
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// logProblems returns the last n lines of the daemon's log at level warning,
// error or fatal (logrus' text format, as shimd and containerd write it): a
// failed call's error is often far from the log's tail when a test fails.
func (d *daemon) logProblems(n int) string {
	b, err := os.ReadFile(d.logPath)
	if err != nil {
		return ""
	}
	var out [][]byte
	for _, l := range bytes.Split(b, []byte("\n")) {
		if bytes.Contains(l, []byte(" level=warning ")) || bytes.Contains(l, []byte(" level=error ")) ||
			bytes.Contains(l, []byte(" level=fatal ")) {
			out = append(out, l)
		}
	}
	if len(out) > n {
		out = out[len(out)-n:]
	}
	return string(bytes.Join(out, []byte("\n")))
}

// waitReady polls ready until it succeeds, the process exits, or timeout.
func (d *daemon) waitReady(timeout time.Duration, ready func() error) error {
	deadline := time.Now().Add(timeout)
	exited := d.exited()
	for {
		err := ready()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("%s exited before it was ready (%v); last log lines:\n%s",
				d.name, d.exitErr(), d.logTail(40))
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s: %v; last log lines:\n%s",
				d.name, timeout, err, d.logTail(40))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// logOnFailure registers a cleanup that prints the log tail if t failed.
func (d *daemon) logOnFailure(t testing.TB) {
	t.Cleanup(func() {
		if t.Failed() {
			if w := d.logProblems(40); w != "" {
				t.Logf("harness: last warnings and errors in %s log %s:\n%s", d.name, d.logPath, w)
			}
			t.Logf("harness: last lines of %s log %s:\n%s", d.name, d.logPath, d.logTail(60))
		}
	})
}

// Daemon is a process a test started with StartDaemon (the control plane of
// critest/cluster, for one). It is only ever signalled by its own PID.
type Daemon struct{ d *daemon }

// StartDaemon starts path with args, its output appended to logPath, and waits
// until ready succeeds (polled every 100ms, up to timeout). A cleanup stops it
// (SIGTERM, SIGKILL after 10s) and prints its log tail if the test failed.
func StartDaemon(t testing.TB, name, path string, args []string, logPath string, timeout time.Duration, ready func() error) *Daemon {
	t.Helper()
	summaryOf(t)
	d := &Daemon{d: &daemon{name: name, path: path, args: args, logPath: logPath}}
	d.d.logOnFailure(t)
	t.Cleanup(func() { d.d.stop() })
	if err := d.Start(timeout, ready); err != nil {
		t.Fatalf("harness: %v", err)
	}
	return d
}

// Start starts the daemon again (after Stop or Kill) and waits until ready.
func (d *Daemon) Start(timeout time.Duration, ready func() error) error {
	if err := d.d.start(); err != nil {
		return err
	}
	if ready == nil {
		return nil
	}
	return d.d.waitReady(timeout, ready)
}

// Stop sends SIGTERM, then SIGKILL after 10s, and waits; it reports whether SIGKILL was needed.
func (d *Daemon) Stop() bool { return d.d.stop() }

// Kill sends SIGKILL and waits.
func (d *Daemon) Kill() { d.d.kill() }

// PID of the running process, or 0.
func (d *Daemon) PID() int { return d.d.pid() }

// LogTail returns the last n lines of the daemon's log.
func (d *Daemon) LogTail(n int) string { return d.d.logTail(n) }
