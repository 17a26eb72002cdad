package main

import (
	"os"
	"runtime/debug"
)

// Go runtime defaults for a small node daemon, used unless the operator sets the
// standard GOGC or GOMEMLIMIT environment variables. shimd's live heap is a few
// MiB and grows little per pod, so collecting at 50% growth costs almost no CPU
// and keeps the heap (and RSS) from doubling between collections; the soft memory
// limit makes the runtime collect and return memory to the kernel sooner when
// shimd's Go memory (heap, stacks, runtime data; not the mapped binary) nears it.
// It is soft: with more live data shimd still works, the collector just runs more.
const (
	defaultGCPercent   = 50
	defaultMemoryLimit = 24 << 20
)

func tuneGoRuntime() {
	if _, ok := os.LookupEnv("GOGC"); !ok {
		debug.SetGCPercent(defaultGCPercent)
	}
	if _, ok := os.LookupEnv("GOMEMLIMIT"); !ok {
		debug.SetMemoryLimit(defaultMemoryLimit)
	}
}
