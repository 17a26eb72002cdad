package container

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestImageSubPath(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"bin", "usr/share", "etc"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(root, "bin", "sh"), nil, 0o755)
	os.Symlink("/usr/share", filepath.Join(root, "abs"))  // absolute: inside root
	os.Symlink("../../..", filepath.Join(root, "bin/up")) // climbs: stops at root
	tests := []struct {
		sub, want, err string
	}{
		{"bin", "bin", ""},
		{"usr/share/", "usr/share", ""},
		{"abs", "usr/share", ""},
		{"bin/up", "", ""}, // the root itself
		{"bin/up/etc", "etc", ""},
		{"/bin", "", "is not relative"},
		{"../x", "", "'..'"},
		{"bin/../etc", "", "'..'"},
		{"nope", "", "is not in the image"},
		{"bin/sh", "", "is not a directory"},
	}
	for _, tt := range tests {
		got, err := imageSubPath(root, tt.sub)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%q: got %q, %v; want error %q", tt.sub, got, err, tt.err)
			}
			continue
		}
		if want := filepath.Join(root, tt.want); err != nil || got != want {
			t.Errorf("%q: got %q, %v; want %q", tt.sub, got, err, want)
		}
	}
}
