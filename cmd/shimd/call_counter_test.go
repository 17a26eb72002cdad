package main

import (
	"testing"
	"time"
)

func TestCallBucket(t *testing.T) {
	for _, tt := range []struct {
		d    time.Duration
		want int
	}{
		{0, 0},
		{500 * time.Nanosecond, 0},
		{time.Microsecond, 0},
		{2 * time.Microsecond, 4},
		{3 * time.Microsecond, 6}, // log2(3) = 1.58
		{time.Millisecond, 39},    // log2(1000) = 9.97
		{time.Hour, callBuckets - 1},
	} {
		if got := callBucket(tt.d); got != tt.want {
			t.Errorf("callBucket(%s) = %d, want %d", tt.d, got, tt.want)
		}
	}
}

func TestCallCounterObserve(t *testing.T) {
	c := newCallCounter()
	c.observe("/m", time.Millisecond)
	c.observe("/m", 3*time.Millisecond)
	got := c.timesSnapshot()["/m"]
	if got.Count != 2 || got.TotalNS != uint64(4*time.Millisecond) || got.MaxNS != uint64(3*time.Millisecond) {
		t.Fatalf("times = %+v", got)
	}
	if got.Buckets[callBucket(time.Millisecond)] != 1 || got.Buckets[callBucket(3*time.Millisecond)] != 1 {
		t.Errorf("buckets: the 1 ms and 3 ms calls not where callBucket puts them")
	}
	if n := c.snapshot()["/m"]; n != 2 {
		t.Errorf("calls counted: %d, want 2", n)
	}
}
