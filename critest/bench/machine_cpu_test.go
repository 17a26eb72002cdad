package bench

import (
	"testing"
	"time"
)

func TestParseMachineBusy(t *testing.T) {
	busy, err := parseMachineBusy("cpu  100 5 50 9000 20 3 2 1 0 0\ncpu0 50 2 25 4500 10 1 1 0 0 0\n")
	if err != nil {
		t.Fatal(err)
	}
	// user 100 + nice 5 + system 50 + irq 3 + softirq 2 + steal 1 = 161 ticks
	if want := 1610 * time.Millisecond; busy != want {
		t.Fatalf("busy = %v, want %v", busy, want)
	}
	if _, err := parseMachineBusy("intr 1 2 3\n"); err == nil {
		t.Fatal("a stat without a cpu line parsed")
	}
}
