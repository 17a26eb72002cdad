package main

import (
	"math"
	"os"
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTuneGoRuntimeDefaultsAndOverrides(t *testing.T) {
	prevGC, prevLimit := debug.SetGCPercent(100), debug.SetMemoryLimit(math.MaxInt64)
	t.Cleanup(func() { debug.SetGCPercent(prevGC); debug.SetMemoryLimit(prevLimit) })

	for _, k := range []string{"GOGC", "GOMEMLIMIT"} {
		if v, ok := os.LookupEnv(k); ok {
			t.Cleanup(func() { os.Setenv(k, v) })
			os.Unsetenv(k)
		}
	}
	tuneGoRuntime()
	require.Equal(t, defaultGCPercent, debug.SetGCPercent(100))
	require.Equal(t, int64(math.MaxInt64), debug.SetMemoryLimit(math.MaxInt64), "no soft memory limit by default")

	// The operator's GOGC and GOMEMLIMIT win (the runtime read them at start-up).
	t.Setenv("GOGC", "80")
	t.Setenv("GOMEMLIMIT", "1GiB")
	debug.SetGCPercent(80)
	debug.SetMemoryLimit(1 << 30)
	tuneGoRuntime()
	require.Equal(t, 80, debug.SetGCPercent(100))
	require.Equal(t, int64(1<<30), debug.SetMemoryLimit(math.MaxInt64))
}
