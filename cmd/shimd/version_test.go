package main

import (
	"testing"

	"github.com/stretchr/testify/require"
	utilversion "k8s.io/apimachinery/pkg/util/version"
)

func TestRuntimeVersionParsesAsTheKubeletParses(t *testing.T) {
	for in, want := range map[string]string{
		"0.1.0-dev":                 "0.1.0-dev",
		"0.1.0-dev+72d7b6a-dirty":   "0.1.0-dev+72d7b6a-dirty",
		"v0.2.0":                    "v0.2.0",
		"v0.2.0-3-g72d7b6a":         "v0.2.0-3-g72d7b6a",
		"72d7b6a-dirty":             "0.1.0-dev+72d7b6a-dirty",
		"72d7b6a":                   "0.1.0-dev+72d7b6a",
		"dev":                       "0.1.0-dev+dev",
		"":                          "0.1.0-dev",
		"my build/2026 (patched)..": "0.1.0-dev+my-build-2026--patched-",
	} {
		got := runtimeVersion(in)
		require.Equal(t, want, got, "runtimeVersion(%q)", in)
		_, err := utilversion.ParseSemantic(got)
		require.NoError(t, err, "the kubelet cannot parse %q", got)
	}
}
