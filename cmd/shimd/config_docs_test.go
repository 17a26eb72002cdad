package main

import (
	"os"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
	"github.com/stretchr/testify/require"
)

// operatingDoc is the operator's manual; its configuration table lists every key.
const operatingDoc = "../../docs/operating.md"

// fileKeys lists the dotted keys of the config file by its TOML tags, with the entries
// of a map of tables (runtimes) as NAME: "sandbox.pause", "runtimes.NAME.type".
func fileKeys(t *testing.T, typ reflect.Type, prefix string) []string {
	t.Helper()
	var keys []string
	for i := 0; i < typ.NumField(); i++ {
		f := typ.Field(i)
		tag := strings.Split(f.Tag.Get("toml"), ",")[0]
		require.NotEmpty(t, tag, "config field %s%s has no toml tag", prefix, f.Name)
		if tag == "-" {
			continue
		}
		key := prefix + tag
		switch {
		case f.Type.Kind() == reflect.Struct:
			keys = append(keys, fileKeys(t, f.Type, key+".")...)
		case f.Type.Kind() == reflect.Map && f.Type.Elem().Kind() == reflect.Struct:
			keys = append(keys, fileKeys(t, f.Type.Elem(), key+".NAME.")...)
		default:
			keys = append(keys, key)
		}
	}
	return keys
}

// defaultFileKeys lists the dotted keys `shimd config default` prints, with each
// runtime handler's name as NAME.
func defaultFileKeys(t *testing.T) []string {
	t.Helper()
	text, err := defaultConfigText(false)
	require.NoError(t, err)
	var m map[string]any
	_, err = toml.Decode(string(text), &m)
	require.NoError(t, err)
	var keys []string
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		for k, v := range m {
			if prefix == "runtimes." {
				k = "NAME"
			}
			if sub, ok := v.(map[string]any); ok {
				walk(prefix+k+".", sub)
				continue
			}
			keys = append(keys, prefix+k)
		}
	}
	walk("", m)
	return keys
}

// tableKeys reads the backquoted names in the first column of the configuration
// table (the one headed "| key | default | meaning |") of a markdown file.
func tableKeys(t *testing.T, text string) []string {
	t.Helper()
	start := strings.Index(text, "| key | default | meaning |")
	require.NotEqual(t, -1, start, "%s has no configuration table (| key | default | meaning |)", operatingDoc)
	tick := regexp.MustCompile("`([^`]+)`")
	var keys []string
	for _, line := range strings.Split(text[start:], "\n")[2:] {
		if !strings.HasPrefix(line, "|") {
			break
		}
		for _, m := range tick.FindAllStringSubmatch(strings.Split(line, "|")[1], -1) {
			keys = append(keys, m[1])
		}
	}
	return keys
}

// Every key of the config file is in docs/operating.md's configuration table, and the
// table names no key the file does not have.
func TestEveryConfigKeyIsInOperatingDoc(t *testing.T) {
	keys := fileKeys(t, reflect.TypeOf(Config{}), "")
	require.Contains(t, keys, "sandbox.pause")
	require.Contains(t, keys, "runtimes.NAME.type")
	for _, k := range defaultFileKeys(t) {
		require.Contains(t, keys, k, "`shimd config default` prints %s, which the struct walk missed", k)
	}

	data, err := os.ReadFile(operatingDoc)
	require.NoError(t, err)
	text := string(data)
	var missing []string
	for _, k := range keys {
		if !strings.Contains(text, "`"+k+"`") {
			missing = append(missing, k)
		}
	}
	sort.Strings(missing)
	require.Empty(t, missing, "config keys not documented in %s (add each, as `key`, to its configuration table)", operatingDoc)

	known := map[string]bool{}
	for _, k := range keys {
		known[k] = true
	}
	table := tableKeys(t, text)
	for _, k := range table {
		require.True(t, known[k], "%s's configuration table names %s, which is not a config key", operatingDoc, k)
	}
	inTable := map[string]bool{}
	for _, k := range table {
		inTable[k] = true
	}
	for _, k := range keys {
		require.True(t, inTable[k], "config key %s is in %s but not in its configuration table", k, operatingDoc)
	}
}
