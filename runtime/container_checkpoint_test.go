package runtime

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
)

func TestValidateCheckpointLocation(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "old.tar"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, ok := range []string{filepath.Join(dir, "new.tar")} {
		if err := validateCheckpointLocation(ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for loc, want := range map[string]string{
		"":                                     "is required",
		"checkpoint.tar":                       "absolute",
		dir + "/sub/../new.tar":                "clean",
		dir + "/new.tar/":                      "clean",
		dir + "//new.tar":                      "clean",
		dir + "/nodir/new.tar":                 "does not exist",
		dir + "/sub":                           "exists",
		dir + "/link":                          "exists",
		dir + "/old.tar":                       "exists",
		dir + "/a\x00b":                        "not a path",
		"/" + strings.Repeat("a/", 3000) + "x": "not a path",
	} {
		err := validateCheckpointLocation(loc)
		if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want InvalidArgument with %q", loc, err, want)
		}
	}
}
