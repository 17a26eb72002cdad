package bench

import (
	"strings"
	"testing"
	"time"
)

func TestCallTimesDiffAndPercentile(t *testing.T) {
	buckets := func(kv map[int]uint64) []uint64 {
		b := make([]uint64, 108)
		for i, n := range kv {
			b[i] = n
		}
		return b
	}
	before := map[string]callTimes{"/a": {Count: 2, TotalNS: 2e6, Buckets: buckets(map[int]uint64{39: 2})}}
	after := map[string]callTimes{
		"/a": {Count: 12, TotalNS: 42e6, Buckets: buckets(map[int]uint64{39: 2, 40: 9, 60: 1})},
		"/b": {Count: 1, TotalNS: 1e6, Buckets: buckets(map[int]uint64{39: 1})},
		"/c": {Count: 5, TotalNS: 5e6, Buckets: buckets(map[int]uint64{39: 5})},
	}
	before["/c"] = after["/c"] // no new calls: left out
	d := callTimesDiff(before, after)
	if len(d) != 2 || d["/a"].Count != 10 || d["/a"].TotalNS != 40e6 || d["/a"].Buckets[39] != 0 || d["/a"].Buckets[40] != 9 {
		t.Fatalf("diff = %+v", d)
	}
	// Bucket 40 is [2^10, 2^10.25) µs: p50 is at most 1.218 ms; bucket 60, p99, at most 2^15.25 µs.
	if got := bucketPercentile(d["/a"], 50); got < 1217*time.Microsecond || got > 1218*time.Microsecond {
		t.Errorf("p50 = %s", got)
	}
	if got := bucketPercentile(d["/a"], 99); got < 38*time.Millisecond || got > 39*time.Millisecond {
		t.Errorf("p99 = %s", got)
	}
	table := callTimesTable("burst of 10", d, 10)
	if !strings.Contains(table, "11 unary calls to containerd, 1.1 per pod, 4.1 ms of call time per pod") {
		t.Errorf("table head:\n%s", table)
	}
	if strings.Index(table, "/a") > strings.Index(table, "/b") {
		t.Errorf("the method with the most time is not first:\n%s", table)
	}
}
