package stats

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// eachBounded calls every index exactly once, never from more goroutines than
// GOMAXPROCS, maxListWorkers and n/minItemsPerWorker allow, and keeps a short list
// on the caller's goroutine.
func TestEachBounded(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(32))
	for _, tc := range []struct{ procs, n, wantMax int }{
		{32, 0, 0},
		{32, 7, 1},
		{32, 16, 2},
		{2, 250, 2},
		{32, 250, maxListWorkers},
		{1, 250, 1},
	} {
		runtime.GOMAXPROCS(tc.procs)
		calls := make([]atomic.Int32, tc.n)
		var mu sync.Mutex
		var now, peak int
		eachBounded(tc.n, func(i int) {
			mu.Lock()
			now++
			peak = max(peak, now)
			mu.Unlock()
			calls[i].Add(1)
			time.Sleep(200 * time.Microsecond) // long enough for the workers to overlap
			mu.Lock()
			now--
			mu.Unlock()
		})
		for i := range calls {
			require.EqualValues(t, 1, calls[i].Load(), "procs %d, n %d: calls of %d", tc.procs, tc.n, i)
		}
		require.LessOrEqual(t, peak, tc.wantMax, "procs %d, n %d", tc.procs, tc.n)
		if tc.wantMax > 1 {
			require.Greater(t, peak, 1, "procs %d, n %d: no two calls overlapped", tc.procs, tc.n)
		}
	}
}
