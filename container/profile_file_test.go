package container

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func TestReadSeccompProfile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, unix.Mkfifo(fifo, 0o600))
	good := filepath.Join(dir, "good.json")
	require.NoError(t, os.WriteFile(good, []byte(`{"defaultAction":"SCMP_ACT_ALLOW"}`), 0o600))
	big := filepath.Join(dir, "big.json")
	require.NoError(t, os.WriteFile(big, make([]byte, maxSeccompProfileSize+1), 0o600))

	for _, tt := range []struct {
		name, path, msg string
	}{
		{"fifo", fifo, "not a regular file"},
		{"dev zero", "/dev/zero", "not a regular file"},
		{"directory", dir, "not a regular file"},
		{"missing", filepath.Join(dir, "nope"), "no such file"},
		{"too big", big, "more than the limit"},
		{"nul", dir + "/a\x00b", "invalid argument"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() { _, err := readSeccompProfile("f", tt.path); done <- err }()
			select {
			case err := <-done:
				require.True(t, errdefs.IsInvalidArgument(err), "%v", err)
				require.ErrorContains(t, err, tt.msg)
				require.ErrorContains(t, err, "f: ")
			case <-time.After(5 * time.Second):
				t.Fatalf("reading %s did not return", tt.path)
			}
		})
	}
	data, err := readSeccompProfile("f", good)
	require.NoError(t, err)
	require.Contains(t, string(data), "SCMP_ACT_ALLOW")
}

func TestAppArmorProfileLoaded(t *testing.T) {
	list := filepath.Join(t.TempDir(), "profiles")
	require.NoError(t, os.WriteFile(list, []byte("cri-validate-apparmor-test-deny-write (enforce)\nnvidia_modprobe//kmod (enforce)\nlsb_release (complain)\n"), 0o644))
	require.True(t, appArmorProfileLoaded(list, "cri-validate-apparmor-test-deny-write"))
	require.True(t, appArmorProfileLoaded(list, "lsb_release"))
	require.False(t, appArmorProfileLoaded(list, "cri-validate-apparmor-test"), "a prefix of a loaded name")
	require.False(t, appArmorProfileLoaded(list, "not-loaded"))
	require.False(t, appArmorProfileLoaded(filepath.Join(t.TempDir(), "missing"), "lsb_release"))
}
