package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// crictl info shows the config with the file's key names.
func TestConfigJSONUsesFileKeys(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Metrics.Address = "127.0.0.1:9101"
	s, err := cfg.JSON()
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(s), &m))
	require.Equal(t, "/run/shimd/shimd.sock", m["socket"])
	require.Equal(t, "5m0s", m["registry"].(map[string]any)["pull_progress_timeout"])
	require.Equal(t, "127.0.0.1:9101", m["metrics"].(map[string]any)["address"])
	require.Equal(t, "io.containerd.runc.v2", m["runtimes"].(map[string]any)["runc"].(map[string]any)["type"])
	require.NotContains(t, s, "RootDir")
}
