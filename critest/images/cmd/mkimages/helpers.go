package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// helperNames are the programs under critest/images/cmd/ that go into the
// images. The pause images' program is not one: it is shimd's (pauseProgram).
var helperNames = []string{"nginx", "httpd", "nonewprivs", "curl", "dig", "nc"}

// pauseProgram is, relative to the repository, the program of the pause images:
// the static C program of shimd's built-in pause (sandbox/pause), which does what
// Kubernetes' pause does. containerd's CRI plugin runs it as its sandbox image in
// the benchmarks and tests, so both runtimes' pods hold their namespaces with the
// same program (a Go stand-in costs each pod about 1.2 ms more CPU to start and
// stop, six threads and 2.2 MB of RSS where this one has one thread and 16 kB).
const pauseProgram = "sandbox/pause/pause.bin"

// buildHelpers compiles the helper programs static and reproducibly (no
// cgo, no paths, no VCS stamp, no build id) into dir and returns their
// contents by name.
func buildHelpers(repo, dir string) (map[string][]byte, error) {
	args := []string{"build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w -buildid=", "-o", dir + "/"}
	for _, n := range helperNames {
		args = append(args, "./critest/images/cmd/"+n)
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64", "GOAMD64=v1", "GOFLAGS=")
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, b)
	}
	out := map[string][]byte{}
	for _, n := range helperNames {
		p := filepath.Join(dir, n)
		if err := checkStatic(p); err != nil {
			return nil, err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		out[n] = b
	}
	return out, nil
}
