package harness

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// DefaultToolsDir is where hack/tools.sh puts its binaries (under "bin")
// when SHIMD_TOOLS is not set.
const DefaultToolsDir = "/var/cache/shimd/tools"

// DefaultCritoolsVersion is the cri-tools release (crictl, critest) the tests run
// when CRITOOLS_VERSION is unset: hack/tools.sh's default, which
// TestCritoolsVersionIsToolsDefault keeps equal.
const DefaultCritoolsVersion = "v1.37.0"

// CritoolsVersion is the cri-tools release under test: $CRITOOLS_VERSION, as for
// hack/tools.sh, or DefaultCritoolsVersion.
func CritoolsVersion() string {
	if v := os.Getenv("CRITOOLS_VERSION"); v != "" {
		return v
	}
	return DefaultCritoolsVersion
}

// Toolset holds the absolute paths of the binaries the tests run.
type Toolset struct {
	// BinDir is the directory that holds Containerd, Shim, Ctr and Runc. It
	// goes first in containerd's PATH so that containerd finds the matching
	// containerd-shim-runc-v2 and the shim finds the matching runc.
	BinDir     string
	Containerd string
	Shim       string // containerd-shim-runc-v2
	Ctr        string
	Runc       string
	// Crictl and Critest are cri-tools CritoolsVersion()'s, from CritoolsDir,
	// which also holds the ginkgo CLI critest's -parallel runs.
	CritoolsDir string
	Crictl      string
	Critest     string
	// Runsc and RunscShim (containerd-shim-runsc-v1) are gVisor's, from the tools
	// directory whichever containerd runs (see HaveRunsc).
	Runsc     string
	RunscShim string
	// Legacy is true when SHIMD_CONTAINERD=1.6 selected Debian's
	// containerd 1.6 and runc 1.1.
	Legacy bool
}

// Tools locates the binaries. SHIMD_TOOLS (default DefaultToolsDir) + "/bin"
// holds containerd 2.4, containerd-shim-runc-v2, ctr and runc 1.5, and in
// bin/cri-tools-<CritoolsVersion()> crictl, critest and ginkgo. With SHIMD_CONTAINERD=1.6 the containerd, shim, ctr and runc are
// Debian's from /usr/bin instead; with SHIMD_CONTAINERD=profiled the containerd is
// bin/containerd-profiled; crictl and critest still come from the
// tools directory. Tools does not check that the files exist: see Require.
func Tools() Toolset {
	dir := os.Getenv("SHIMD_TOOLS")
	if dir == "" {
		dir = DefaultToolsDir
	}
	bin := filepath.Join(dir, "bin")
	cri := filepath.Join(bin, "cri-tools-"+CritoolsVersion())
	ts := Toolset{
		BinDir:      bin,
		Containerd:  filepath.Join(bin, "containerd"),
		Shim:        filepath.Join(bin, "containerd-shim-runc-v2"),
		Ctr:         filepath.Join(bin, "ctr"),
		Runc:        filepath.Join(bin, "runc"),
		CritoolsDir: cri,
		Crictl:      filepath.Join(cri, "crictl"),
		Critest:     filepath.Join(cri, "critest"),
		Runsc:       filepath.Join(bin, "runsc"),
		RunscShim:   filepath.Join(bin, "containerd-shim-runsc-v1"),
	}
	if os.Getenv("SHIMD_CONTAINERD") == "profiled" {
		// containerd 2.4 built to turn on Go's block and mutex profiles from its
		// environment (hack/tools.sh containerd-profiled), for benchmarks.
		ts.Containerd = filepath.Join(bin, "containerd-profiled")
	}
	if v := os.Getenv("SHIMD_CONTAINERD"); v == "1.6" || v == "1" {
		ts.Legacy = true
		ts.BinDir = "/usr/bin"
		ts.Containerd = "/usr/bin/containerd"
		ts.Shim = "/usr/bin/containerd-shim-runc-v2"
		ts.Ctr = "/usr/bin/ctr"
		ts.Runc = "/usr/bin/runc"
	}
	return ts
}

// Require fails the test unless every given path is an executable file.
func (ts Toolset) Require(t testing.TB, paths ...string) {
	t.Helper()
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			continue
		}
		t.Fatalf("harness: %s is missing or not executable (%v); build it with hack/tools.sh "+
			"(SHIMD_TOOLS=%q, SHIMD_CONTAINERD=%q)", p, err, os.Getenv("SHIMD_TOOLS"), os.Getenv("SHIMD_CONTAINERD"))
	}
}

// binaryVersion is a parsed "containerd --version" line.
type binaryVersion struct {
	Major, Minor int
	Raw          string
}

var versionCache sync.Map // binary path -> binaryVersion

// containerdVersion runs "<bin> --version" once per path and parses lines like
// "containerd github.com/containerd/containerd/v2 v2.4.2 <rev>" and
// "containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3".
func containerdVersion(bin string) (binaryVersion, error) {
	if v, ok := versionCache.Load(bin); ok {
		return v.(binaryVersion), nil
	}
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil {
		return binaryVersion{}, fmt.Errorf("%s --version: %w: %s", bin, err, out)
	}
	v, err := parseContainerdVersion(string(out))
	if err != nil {
		return binaryVersion{}, fmt.Errorf("%s --version: %w", bin, err)
	}
	versionCache.Store(bin, v)
	return v, nil
}

func parseContainerdVersion(out string) (binaryVersion, error) {
	f := strings.Fields(out)
	if len(f) < 3 {
		return binaryVersion{}, fmt.Errorf("unexpected version output %q", out)
	}
	raw := strings.TrimPrefix(f[2], "v")
	parts := strings.SplitN(raw, ".", 3)
	if len(parts) < 2 {
		return binaryVersion{}, fmt.Errorf("unexpected version %q", f[2])
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(leadingDigits(parts[1]))
	if err1 != nil || err2 != nil {
		return binaryVersion{}, fmt.Errorf("unexpected version %q", f[2])
	}
	return binaryVersion{Major: major, Minor: minor, Raw: f[2]}, nil
}

func leadingDigits(s string) string {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return s[:i]
}
