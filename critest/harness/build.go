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

var shimdBuild struct {
	once sync.Once
	dir  string // temporary directory holding the built binary
	bin  string
	err  error
}

// shimdBinary returns $SHIMD_BIN, or builds ./cmd/shimd once per test binary
// with "go build" from the module root found by walking up from the working
// directory.
func shimdBinary() (string, error) {
	if bin := os.Getenv("SHIMD_BIN"); bin != "" {
		if _, err := os.Stat(bin); err != nil {
			return "", fmt.Errorf("SHIMD_BIN: %w", err)
		}
		return bin, nil
	}
	b := &shimdBuild
	b.once.Do(func() {
		root, err := RepoRoot()
		if err != nil {
			b.err = err
			return
		}
		dir, err := os.MkdirTemp("", "shimd-bin-")
		if err != nil {
			b.err = err
			return
		}
		b.dir = dir
		bin := filepath.Join(dir, "shimd")
		cmd := exec.Command("go", "build", "-o", bin, "./cmd/shimd")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build ./cmd/shimd in %s: %w\n%s", root, err, out)
			return
		}
		b.bin = bin
	})
	return b.bin, b.err
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

// Main runs the tests and then removes the shimd binary the harness built.
// Call it from TestMain in packages that start shimd:
//
//	func TestMain(m *testing.M) { harness.Main(m) }
func Main(m *testing.M) {
	code := m.Run()
	if shimdBuild.dir != "" {
		os.RemoveAll(shimdBuild.dir)
	}
	os.Exit(code)
}
