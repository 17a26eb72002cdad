package main

import (
	"errors"
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestAppArmorEnabled(t *testing.T) {
	t.Setenv("container", "")
	for content, want := range map[string]bool{"Y\n": true, "N\n": false, "": false} {
		read := func(p string) ([]byte, error) {
			require.Equal(t, "/sys/module/apparmor/parameters/enabled", p)
			return []byte(content), nil
		}
		require.Equal(t, want, appArmorEnabled(read), "enabled=%q", content)
	}
	missing := func(string) ([]byte, error) { return nil, os.ErrNotExist }
	require.False(t, appArmorEnabled(missing), "no AppArmor module")
	t.Setenv("container", "docker")
	require.False(t, appArmorEnabled(func(string) ([]byte, error) { return []byte("Y"), nil }), "in a container")
}

func TestAppArmorDefaultProfile(t *testing.T) {
	loadErr := errors.New("apparmor_parser: exit status 1")
	found := func(string) (string, error) { return "/usr/sbin/apparmor_parser", nil }
	notFound := func(string) (string, error) { return "", exec.ErrNotFound }
	tests := []struct {
		name     string
		enabled  bool
		loadErr  error
		lookPath func(string) (string, error)
		want     string
		loads    int
	}{
		{name: "no AppArmor: nothing loaded", lookPath: found, want: ""},
		{name: "loaded", enabled: true, lookPath: found, want: appArmorDefaultName, loads: 1},
		{name: "already loaded, no parser", enabled: true, lookPath: notFound, want: appArmorDefaultName, loads: 1},
		{name: "no parser: unconfined, as containerd", enabled: true, loadErr: loadErr, lookPath: notFound, want: "", loads: 1},
		{name: "parser fails: kept, creates retry", enabled: true, loadErr: loadErr, lookPath: found, want: appArmorDefaultName, loads: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			loads := 0
			load := func(name string) error {
				require.Equal(t, "shimd-default", name)
				loads++
				return tc.loadErr
			}
			require.Equal(t, tc.want, appArmorDefaultProfile(tc.enabled, load, tc.lookPath))
			require.Equal(t, tc.loads, loads)
		})
	}
}
