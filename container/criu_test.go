package container

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/errdefs"
)

func TestParseCRIUVersion(t *testing.T) {
	for out, want := range map[string]int{
		"Version: 4.1.1\n":                         40101,
		"Version: 3.17.1\nGitID: v3.17.1\n":        31701,
		"Version: 4.1\n":                           40100,
		"criu: warning\nVersion: 3.16\nGitID: x\n": 31600,
	} {
		got, err := parseCRIUVersion([]byte(out))
		if err != nil || got != want {
			t.Errorf("parseCRIUVersion(%q) = %d, %v; want %d", out, got, err, want)
		}
	}
	if _, err := parseCRIUVersion([]byte("criu: command not found")); err == nil {
		t.Error("no version: no error")
	}
}

// The checker refuses a missing, too old or failing CRIU with FailedPrecondition,
// keeps a pass, and checks a failure again.
func TestCRIUChecker(t *testing.T) {
	var version, checkOut string
	var checkErr error
	calls := 0
	k := &criuChecker{
		lookPath: func(string) (string, error) { return "/usr/local/sbin/criu", nil },
		run: func(_ context.Context, _ string, args ...string) ([]byte, error) {
			calls++
			if args[0] == "--version" {
				return []byte(version), nil
			}
			return []byte(checkOut), checkErr
		},
	}
	version, checkOut, checkErr = "Version: 3.15\n", "", nil
	err := k.check(context.Background())
	if !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "CRIU 3.15.0") {
		t.Fatalf("CRIU 3.15: %v", err)
	}
	version, checkOut, checkErr = "Version: 3.17.1\n", "Error (criu/vdso.c:627): vdso: Unexpected rt vDSO area bounds\nLooks bad\n", errors.New("exit status 1")
	err = k.check(context.Background())
	if !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "Unexpected rt vDSO area bounds") {
		t.Fatalf("failing criu check: %v", err)
	}
	version, checkOut, checkErr = "Version: 4.1.1\n", "Looks good.\n", nil
	if err := k.check(context.Background()); err != nil {
		t.Fatalf("CRIU 4.1.1: %v", err)
	}
	before := calls
	if err := k.check(context.Background()); err != nil || calls != before {
		t.Fatalf("a pass is not kept: %v, %d more calls", err, calls-before)
	}
	missing := &criuChecker{lookPath: func(string) (string, error) {
		return "", errors.New(`exec: "criu": executable file not found in $PATH`)
	}}
	if err := missing.check(context.Background()); !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "hack/tools.sh criu") {
		t.Fatalf("no criu: %v", err)
	}
}

func TestOverlayUpperDir(t *testing.T) {
	ov := []mount.Mount{{Type: "overlay", Source: "overlay", Options: []string{"index=off", "workdir=/s/2/work", "upperdir=/s/2/fs", "lowerdir=/s/1/fs"}}}
	if got := overlayUpperDir(ov); got != "/s/2/fs" {
		t.Errorf("overlay: %q", got)
	}
	bind := []mount.Mount{{Type: "bind", Source: "/s/2/fs", Options: []string{"rbind", "rw"}}}
	if got := overlayUpperDir(bind); got != "" {
		t.Errorf("bind: %q", got)
	}
}

func TestRestoreErrorExplainsTakenPIDs(t *testing.T) {
	err := restoreError(errors.New("OCI runtime restore failed"), "(00.05) Error (criu/cr-restore.c:1230): Can't fork for 7: File exists")
	if !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "PID namespace") {
		t.Fatalf("taken pid: %v", err)
	}
	err = restoreError(errors.New("OCI runtime restore failed"), "Error (criu/mount.c:1): no mapping")
	if !errdefs.IsFailedPrecondition(err) || strings.Contains(err.Error(), "PID namespace") {
		t.Fatalf("other failure: %v", err)
	}
}
