package conformance

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
)

// Skip is one entry of critest/skip: a Go regular expression that ginkgo
// matches against a spec's full text, and why the spec cannot pass here.
type Skip struct {
	Pattern string
	Reason  string
	Line    int
}

// ReadSkipFile parses the skip list at path (see ParseSkips).
func ReadSkipFile(path string) ([]Skip, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	skips, err := ParseSkips(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return skips, nil
}

// ParseSkips reads one skip per line: "REGEX  # reason". Blank lines and
// lines starting with "#" are comments. The reason is mandatory, and the
// regular expression must compile (ginkgo uses Go's regexp syntax too).
func ParseSkips(r io.Reader) ([]Skip, error) {
	var skips []Skip
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.Index(line, " #")
		if i < 0 {
			return nil, fmt.Errorf("line %d: %q has no \"# reason\" comment", n, line)
		}
		s := Skip{
			Pattern: strings.TrimSpace(line[:i]),
			Reason:  strings.TrimSpace(line[i+2:]),
			Line:    n,
		}
		if s.Reason == "" {
			return nil, fmt.Errorf("line %d: empty reason", n)
		}
		if _, err := regexp.Compile(s.Pattern); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		skips = append(skips, s)
	}
	return skips, sc.Err()
}

// SkipRegex joins the patterns into one alternation for -ginkgo.skip, or ""
// when there are none.
func SkipRegex(skips []Skip) string {
	parts := make([]string, 0, len(skips))
	for _, s := range skips {
		parts = append(parts, "(?:"+s.Pattern+")")
	}
	return strings.Join(parts, "|")
}

// AllowedRuntimeSkips are the reasons critest may give for skipping a spec
// by itself, at run time, without failing TestCritest: only what this machine
// lacks. Any other reason ("runtime does not implement recursive readonly
// mounts", "no runtime handler found which supports user namespaces", ...)
// means shimd does not advertise a feature containerd's own CRI plugin
// passes here, so it counts as a failure.
var AllowedRuntimeSkips = []string{
	"AppArmor is disabled on this host", // no AppArmor in this kernel
}

// AllowedRuntimeSkip reports whether reason is one of AllowedRuntimeSkips.
func AllowedRuntimeSkip(reason string) bool {
	for _, r := range AllowedRuntimeSkips {
		if reason == r {
			return true
		}
	}
	return false
}
