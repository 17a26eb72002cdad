package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// renderUnit fills in the unit template as `make install` does.
func renderUnit(t *testing.T, bindir string) string {
	data, err := os.ReadFile("../../hack/systemd/shimd.service")
	require.NoError(t, err)
	s := strings.ReplaceAll(string(data), "@BINDIR@", bindir)
	return strings.ReplaceAll(s, "@CONFIG@", "/etc/shimd/config.toml")
}

func TestSystemdUnitSettings(t *testing.T) {
	unit := renderUnit(t, "/usr/local/bin")
	for _, want := range []string{
		"Type=notify", "KillMode=process", "Restart=always", "Delegate=yes",
		"After=network-online.target local-fs.target containerd.service", "Requires=containerd.service",
		"LimitNOFILE=1048576", "ExecStart=/usr/local/bin/shimd --config /etc/shimd/config.toml",
	} {
		require.Contains(t, unit, "\n"+want+"\n")
	}
}

// systemdAnalyzeVerify runs `systemd-analyze verify` (which needs no running systemd)
// and fails on any complaint, warnings included.
func systemdAnalyzeVerify(t *testing.T, unitPath string, unit string) {
	t.Helper()
	bin, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed (Debian package systemd; hack/tools.sh debs installs it)")
	}
	cmd := exec.Command(bin, "verify", unit)
	cmd.Dir = unitPath
	cmd.Env = append(os.Environ(), "SYSTEMD_UNIT_PATH="+unitPath+":", "SYSTEMD_LOG_COLOR=0")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	require.NoError(t, err, "systemd-analyze verify %s: %s", unit, out.String())
	require.Empty(t, strings.TrimSpace(out.String()), "systemd-analyze verify %s complained", unit)
}

// fakeBinDir holds executables named like the ones the units start (verify checks that
// ExecStart is executable).
func fakeBinDir(t *testing.T, names ...string) string {
	self, err := os.Executable()
	require.NoError(t, err)
	dir := t.TempDir()
	for _, n := range names {
		require.NoError(t, os.Symlink(self, filepath.Join(dir, n)))
	}
	return dir
}

func TestSystemdAnalyzeVerifyShimdUnit(t *testing.T) {
	bindir := fakeBinDir(t, "shimd", "containerd")
	units := t.TempDir()
	// The unit requires containerd.service: a stand-in so that verify resolves it.
	containerdUnit := "[Unit]\nDescription=containerd\n[Service]\nType=notify\nExecStart=" + bindir + "/containerd\n"
	require.NoError(t, os.WriteFile(filepath.Join(units, "containerd.service"), []byte(containerdUnit), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(units, "shimd.service"), []byte(renderUnit(t, bindir)), 0o644))
	systemdAnalyzeVerify(t, units, "shimd.service")
}

func TestSystemdAnalyzeVerifyContainerdDropIn(t *testing.T) {
	bindir := fakeBinDir(t, "containerd")
	units := t.TempDir()
	base := "[Unit]\nDescription=containerd\n[Service]\nType=notify\nExecStart=/usr/bin/containerd\nDelegate=yes\nKillMode=process\n"
	require.NoError(t, os.WriteFile(filepath.Join(units, "containerd.service"), []byte(base), 0o644))
	dropIn, err := os.ReadFile("../../hack/systemd/containerd.service.d/10-shimd.conf")
	require.NoError(t, err)
	// The binary path as installed by Debian; here, an executable stand-in.
	s := strings.ReplaceAll(string(dropIn), "/usr/bin/containerd", bindir+"/containerd")
	require.NotEqual(t, string(dropIn), s, "the drop-in starts /usr/bin/containerd")
	require.NoError(t, os.MkdirAll(filepath.Join(units, "containerd.service.d"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(units, "containerd.service.d", "10-shimd.conf"), []byte(s), 0o644))
	systemdAnalyzeVerify(t, units, "containerd.service")
}
