package main

import (
	"os"
	"runtime/debug"
)

// Go runtime default for a small node daemon, used unless the operator sets the
// standard GOGC environment variable: shimd's live heap is a few MiB and grows little
// per pod, so collecting at 50% growth costs little CPU and keeps the heap (and RSS)
// from doubling between collections. There is no default soft memory limit
// (GOMEMLIMIT): a fixed one is a floor under the collector's pace, and shimd's live
// memory (heap and goroutine stacks) grows with the pods; at 250 pods a 24 MiB limit
// kept the collector running all the time, more than half of shimd's CPU
// (docs/benchmarks.md, "Steady-state polling"). An operator's GOMEMLIMIT still holds.
const defaultGCPercent = 50

func tuneGoRuntime() {
	if _, ok := os.LookupEnv("GOGC"); !ok {
		debug.SetGCPercent(defaultGCPercent)
	}
}
