package harness

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// BuildShimdAt builds ./cmd/shimd as it was at git revision rev of this repository,
// in a temporary worktree, and returns the binary (removed with the test's other
// builds when Main ends). It skips the test when rev is not in the history (a
// shallow clone).
func BuildShimdAt(t testing.TB, rev string) string {
	t.Helper()
	root, err := RepoRoot()
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	full, err := exec.Command("git", "-C", root, "rev-parse", "--verify", rev+"^{commit}").Output()
	if err != nil {
		t.Skipf("revision %s is not in this clone's history (a shallow clone?): %v", rev, err)
	}
	commit := strings.TrimSpace(string(full))
	builds.mu.Lock()
	defer builds.mu.Unlock()
	if builds.dir == "" {
		if builds.dir, err = os.MkdirTemp("", "shimd-bin-"); err != nil {
			t.Fatalf("harness: %v", err)
		}
	}
	bin := filepath.Join(builds.dir, "shimd-"+commit[:12])
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	tree := filepath.Join(builds.dir, "tree-"+commit[:12])
	if out, err := exec.Command("git", "-C", root, "worktree", "add", "--detach", tree, commit).CombinedOutput(); err != nil {
		t.Fatalf("harness: git worktree add %s: %v\n%s", commit, err, out)
	}
	defer func() {
		if out, err := exec.Command("git", "-C", root, "worktree", "remove", "--force", tree).CombinedOutput(); err != nil {
			t.Logf("harness: git worktree remove %s: %v\n%s", tree, err, out)
		}
	}()
	cmd := exec.Command("go", "build", "-tags", "nri_no_wasm", "-ldflags", "-X main.version="+commit[:12], "-o", bin, "./cmd/shimd")
	cmd.Dir = tree
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("harness: go build shimd at %s: %v\n%s", commit, err, out)
	}
	return bin
}

// UseBinary makes the next Start run the shimd binary at path (stop shimd first).
func (s *Shimd) UseBinary(path string) error {
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("shimd binary: %w", err)
	}
	s.proc.path = path
	return nil
}

// Binary is the shimd binary Start runs.
func (s *Shimd) Binary() string { return s.proc.path }
