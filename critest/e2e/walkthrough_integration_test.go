//go:build integration

package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shimd/shimd/critest/harness"
)

// examples is hack/examples, the files README's "First pod" walkthrough uses.
func examples(t *testing.T) string {
	_, file, _, ok := runtime.Caller(0)
	require.True(t, ok)
	return filepath.Join(filepath.Dir(file), "..", "..", "hack", "examples")
}

// The README walkthrough, command by command, offline: the built-in pause image only.
func TestReadmeFirstPodWalkthrough(t *testing.T) {
	requireRoot(t)
	env := harness.New(t, harness.Options{})
	ex := examples(t)
	crictl := func(args ...string) string {
		t.Helper()
		out, err := env.Shimd.Crictl(t, args...)
		require.NoError(t, err)
		return strings.TrimSpace(out)
	}
	require.NoError(t, os.MkdirAll("/tmp/shimd-first-pod", 0o755))
	t.Cleanup(func() { os.RemoveAll("/tmp/shimd-first-pod") })

	info := crictl("info")
	var parsed struct {
		Status struct {
			Conditions []struct {
				Type   string
				Status bool
			}
		}
		Config  map[string]any
		Network struct{ Name string }
	}
	require.NoError(t, json.Unmarshal([]byte(info), &parsed), info)
	require.Equal(t, env.Shimd.Socket(), parsed.Config["socket"], "crictl info shows the config with the file's keys")
	require.Contains(t, parsed.Config, "metrics")
	require.Equal(t, env.CNI.Name, parsed.Network.Name)

	pod := crictl("runp", filepath.Join(ex, "pod.json"))
	require.Len(t, pod, 64)
	ctr := crictl("create", pod, filepath.Join(ex, "container.json"), filepath.Join(ex, "pod.json"))
	require.Len(t, ctr, 64)
	crictl("start", ctr)
	ps := crictl("ps", "--pod", pod)
	require.Contains(t, ps, "Running")
	require.Contains(t, ps, "pause")
	pods := crictl("pods", "--name", "first-pod")
	require.Contains(t, pods, "Ready")
	ip := crictl("inspectp", "--output", "go-template", "--template", "{{.status.network.ip}}", pod)
	requireInSubnet(t, env, ip)
	crictl("stopp", pod)
	crictl("rmp", pod)
	require.Empty(t, crictl("pods", "--quiet"))
}
