package conformance

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// Cmd is one run of a ginkgo test binary (critest, or Kubernetes' e2e.test
// through the ginkgo CLI).
type Cmd struct {
	Bin     string
	Args    []string
	Env     []string // added to the environment
	PathDir string   // put first in PATH (the ginkgo CLI)
	Tmp     string   // parent of the run's TMPDIR
	LogPath string
	// Reserve is how much of go test's -timeout is kept for the cleanups:
	// the run is stopped that long before the deadline.
	Reserve time.Duration
}

// Run runs c.Bin, streaming its output to the test's stdout and to
// c.LogPath, and parses ginkgo's summary. It stops the run (SIGINT to its
// process group, which holds the ginkgo CLI and its nodes, then SIGKILL)
// c.Reserve before go test's deadline.
func Run(t *testing.T, c Cmd) (Summary, bool, error) {
	t.Helper()
	ctx := context.Background()
	if dl, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, dl.Add(-c.Reserve))
		defer cancel()
	}
	logf, err := os.Create(c.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	// critest -parallel leaves a /tmp/cri-test* directory behind: give it
	// a private TMPDIR, removed with the base directory.
	tmp, err := os.MkdirTemp(c.Tmp, "tmp-")
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	w := io.MultiWriter(os.Stdout, logf, &out)

	cmd := exec.CommandContext(ctx, c.Bin, c.Args...)
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(),
		"PATH="+c.PathDir+string(os.PathListSeparator)+os.Getenv("PATH"),
		"TMPDIR="+tmp)
	cmd.Env = append(cmd.Env, c.Env...)
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	cmd.Cancel = func() error {
		// ginkgo reports what was running when interrupted.
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
	}
	cmd.WaitDelay = time.Minute
	start := time.Now()
	runErr := cmd.Run()
	if cmd.Process != nil {
		// Whatever of the group is left (nodes of an interrupted run): the
		// group is the run's own, created above.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	if ctx.Err() != nil {
		runErr = fmt.Errorf("%w (stopped %s before go test's timeout): %v", ctx.Err(), c.Reserve, runErr)
	}
	t.Logf("%s exited after %s: %v", filepath.Base(c.Bin), time.Since(start).Round(time.Second), runErr)
	sum, ok := ParseSummary(out.String())
	return sum, ok, runErr
}
