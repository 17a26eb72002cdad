package main

import (
	"encoding/json"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// configKeys lists every key of the config file, dotted, with map entries as NAME.
func configKeys(t reflect.Type, prefix string) []string {
	var keys []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		key := prefix + f.Tag.Get("toml")
		switch {
		case f.Type.Kind() == reflect.Struct:
			keys = append(keys, configKeys(f.Type, key+".")...)
		case f.Type.Kind() == reflect.Map && f.Type.Elem().Kind() == reflect.Struct:
			keys = append(keys, configKeys(f.Type.Elem(), key+".NAME.")...)
		default:
			keys = append(keys, key)
		}
	}
	return keys
}

// readmeKeys reads the keys in the first column of README's configuration table.
func readmeKeys(t *testing.T) map[string]bool {
	data, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	text := string(data)
	start := strings.Index(text, "| key | default | meaning |")
	require.NotEqual(t, -1, start, "README has no configuration table")
	keys := map[string]bool{}
	tick := regexp.MustCompile("`([^`]+)`")
	for _, line := range strings.Split(text[start:], "\n")[2:] {
		if !strings.HasPrefix(line, "|") {
			break
		}
		first := strings.Split(line, "|")[1]
		for _, m := range tick.FindAllStringSubmatch(first, -1) {
			keys[m[1]] = true
		}
	}
	return keys
}

func TestEveryConfigKeyIsInREADME(t *testing.T) {
	documented := readmeKeys(t)
	all := configKeys(reflect.TypeOf(Config{}), "")
	require.Contains(t, all, "metrics.address")
	require.Contains(t, all, "runtimes.NAME.type")
	for _, k := range all {
		require.True(t, documented[k], "config key %s is missing from README's configuration table", k)
	}
	known := map[string]bool{}
	for _, k := range all {
		known[k] = true
	}
	for k := range documented {
		require.True(t, known[k], "README documents %s, which is not a config key", k)
	}
}

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
