package harness

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// builds are the binaries built by Build, by package, in one temporary directory
// that Main removes.
var builds struct {
	mu   sync.Mutex
	dir  string
	bins map[string]*build
}

type build struct {
	once sync.Once
	bin  string
	err  error
}

// Build builds a main package of this module (e.g. "./cmd/shimd") once per test
// binary with "go build" from the module root found by walking up from the
// working directory, and returns the binary's path.
func Build(pkg string) (string, error) {
	builds.mu.Lock()
	if builds.bins == nil {
		builds.bins = map[string]*build{}
	}
	b := builds.bins[pkg]
	if b == nil {
		b = &build{}
		builds.bins[pkg] = b
	}
	builds.mu.Unlock()
	b.once.Do(func() {
		root, err := RepoRoot()
		if err != nil {
			b.err = err
			return
		}
		builds.mu.Lock()
		if builds.dir == "" {
			builds.dir, err = os.MkdirTemp("", "shimd-bin-")
		}
		dir := builds.dir
		builds.mu.Unlock()
		if err != nil {
			b.err = err
			return
		}
		bin := filepath.Join(dir, filepath.Base(pkg))
		// The tags of make build (see the Makefile).
		cmd := exec.Command("go", "build", "-tags", "nri_no_wasm", "-o", bin, pkg)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build %s in %s: %w\n%s", pkg, root, err, out)
			return
		}
		b.bin = bin
	})
	return b.bin, b.err
}

// shimdBinary returns $SHIMD_BIN, or builds ./cmd/shimd (Build).
func shimdBinary() (string, error) {
	if bin := os.Getenv("SHIMD_BIN"); bin != "" {
		if _, err := os.Stat(bin); err != nil {
			return "", fmt.Errorf("SHIMD_BIN: %w", err)
		}
		return bin, nil
	}
	return Build("./cmd/shimd")
}

// RepoRoot walks up from the working directory to the directory holding
// go.mod.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// Main runs the tests and then removes the binaries the harness built.
// Call it from TestMain in packages that start shimd:
//
//	func TestMain(m *testing.M) { harness.Main(m) }
func Main(m *testing.M) {
	code := m.Run()
	if builds.dir != "" {
		os.RemoveAll(builds.dir)
	}
	os.Exit(code)
}
