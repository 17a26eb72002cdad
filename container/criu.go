package container

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/containerd/errdefs"
)

// minCRIUVersion is the oldest CRIU that checkpoints and restores a container in a
// pod (containerd's and CRI-O's floor, 3.16). `criu check` decides the rest: Debian
// 12's 3.17 passes the version floor but fails the check on kernels from 6.13.
const minCRIUVersion = 31600

// criuChecker answers whether the CRIU on shimd's PATH can checkpoint and restore.
// runc runs `criu` from the PATH its shim inherited from containerd, which on a node
// is the same as shimd's; docs/operating.md says so. A pass is kept; a failure is
// checked again at the next request, so installing CRIU needs no restart.
type criuChecker struct {
	mu sync.Mutex
	ok bool
	// lookPath and run are exec.LookPath and running a command; tests replace them.
	lookPath func(string) (string, error)
	run      func(ctx context.Context, name string, args ...string) ([]byte, error)
}

func newCRIUChecker() *criuChecker {
	return &criuChecker{
		lookPath: exec.LookPath,
		run: func(ctx context.Context, name string, args ...string) ([]byte, error) {
			return exec.CommandContext(ctx, name, args...).CombinedOutput()
		},
	}
}

var criuVersionRE = regexp.MustCompile(`(?m)^Version:\s*(\d+)\.(\d+)(?:\.(\d+))?`)

// parseCRIUVersion turns the output of `criu --version` into major*10000 +
// minor*100 + patch (go-criu's form).
func parseCRIUVersion(out []byte) (int, error) {
	m := criuVersionRE.FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("no version in %q", strings.TrimSpace(string(out)))
	}
	major, _ := strconv.Atoi(string(m[1]))
	minor, _ := strconv.Atoi(string(m[2]))
	patch, _ := strconv.Atoi(string(m[3]))
	return major*10000 + minor*100 + patch, nil
}

// check returns nil when CRIU is usable, else FailedPrecondition saying why, with
// what `criu check` printed.
func (k *criuChecker) check(ctx context.Context) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.ok {
		return nil
	}
	path, err := k.lookPath("criu")
	if err != nil {
		return fmt.Errorf("checkpoint/restore needs CRIU 4.x on shimd's PATH (hack/tools.sh criu builds it): %v: %w", err, errdefs.ErrFailedPrecondition)
	}
	out, err := k.run(ctx, path, "--version")
	if err != nil {
		return fmt.Errorf("%s --version: %v: %s: %w", path, err, bytes.TrimSpace(out), errdefs.ErrFailedPrecondition)
	}
	v, err := parseCRIUVersion(out)
	if err != nil {
		return fmt.Errorf("%s --version: %v: %w", path, err, errdefs.ErrFailedPrecondition)
	}
	if v < minCRIUVersion {
		return fmt.Errorf("%s is CRIU %d.%d.%d; checkpoint/restore needs at least 3.16 (4.x on kernels from 6.13): %w",
			path, v/10000, v/100%100, v%100, errdefs.ErrFailedPrecondition)
	}
	if out, err := k.run(ctx, path, "check"); err != nil {
		return fmt.Errorf("`%s check` failed (%v): %s: %w", path, err, lastLines(out, 5), errdefs.ErrFailedPrecondition)
	}
	k.ok = true
	return nil
}

// lastLines returns the last n non-empty lines of out, joined by "; ".
func lastLines(out []byte, n int) string {
	var lines []string
	for _, l := range strings.Split(string(out), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "; ")
}
