package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// helperNames are the programs under critest/images/cmd/ that go into the
// images.
var helperNames = []string{"nginx", "httpd", "nonewprivs", "pause", "curl", "dig", "nc"}

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
