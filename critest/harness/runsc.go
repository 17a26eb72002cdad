package harness

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// RunscHandler is the runtime handler name the harness gives gVisor, in shimd and in
// containerd's own CRI plugin.
const RunscHandler = "runsc"

// RunscRuntimeType is the containerd runtime (shim) of the runsc handler.
const RunscRuntimeType = "io.containerd.runsc.v1"

// RunscPlatform is the gVisor platform the tests use: this machine has no /dev/kvm.
const RunscPlatform = "systrap"

// HaveRunsc reports whether the runsc handler can run: runsc and
// containerd-shim-runsc-v1 are in the tools directory and containerd is not 1.6; if
// not, why (for t.Skip).
func (ts Toolset) HaveRunsc() (bool, string) {
	if ts.Legacy {
		// Tried: RunPodSandbox fails with `start failed: dial unix {"version":2,
		// "address":"unix:///run/containerd/s/...","protocol":"ttrpc"}: connect: invalid
		// argument`.
		return false, "containerd 1.6 cannot start this containerd-shim-runsc-v1: the shim answers \"start\" " +
			"with the JSON bootstrap parameters of containerd 1.7 and later, which 1.6 takes for a socket path"
	}
	for _, p := range []string{ts.Runsc, ts.RunscShim} {
		fi, err := os.Stat(p)
		if err != nil || !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0 {
			return false, fmt.Sprintf("%s is not in the tools directory (build it with: bash hack/tools.sh runsc)", filepath.Base(p))
		}
	}
	return true, ""
}

// SkipWithoutRunsc skips the test unless runsc and its shim are in the tools directory.
func SkipWithoutRunsc(t testing.TB) {
	t.Helper()
	if ok, why := Tools().HaveRunsc(); !ok {
		t.Skip(why)
	}
}

// WriteRunscConfig writes the runsc shim's options file (its "config.toml": runsc
// binary, state root, runsc flags) into dir and returns its path. Both shimd
// (runtimes.runsc.config_path) and containerd's CRI plugin (options.ConfigPath) hand
// this path to containerd-shim-runsc-v1. The runsc root lies under dir, so that the
// leak check finds runsc's sandbox and gofer processes by their command line.
func WriteRunscConfig(t testing.TB, dir string) string {
	t.Helper()
	tools := Tools()
	tools.Require(t, tools.Runsc, tools.RunscShim)
	q := strconv.Quote
	var b strings.Builder
	fmt.Fprintf(&b, "binary_name = %s\n", q(tools.Runsc))
	fmt.Fprintf(&b, "root = %s\n", q(filepath.Join(dir, "runsc")))
	fmt.Fprintf(&b, "[runsc_config]\n")
	fmt.Fprintf(&b, "platform = %s\n", q(RunscPlatform))
	if os.Getenv("SHIMD_RUNSC_DEBUG") == "1" {
		fmt.Fprintf(&b, "debug = \"true\"\ndebug-log = %s\n", q(filepath.Join(dir, "runsc-logs")+"/"))
	}
	p := filepath.Join(dir, "runsc.toml")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("harness: %v", err)
	}
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatalf("harness: %v", err)
	}
	return p
}
