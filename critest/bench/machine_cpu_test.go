package bench

import (
	"testing"
	"time"
)

func TestParseMachineBusy(t *testing.T) {
	m, err := parseMachineSnap("cpu  100 5 50 9000 20 3 2 1 0 0\ncpu0 50 2 25 4500 10 1 1 0 0 0\n", "", nil)
	busy := m.busy()
	if err != nil {
		t.Fatal(err)
	}
	// user 100 + nice 5 + system 50 + irq 3 + softirq 2 + steal 1 = 161 ticks
	if want := 1610 * time.Millisecond; busy != want {
		t.Fatalf("busy = %v, want %v", busy, want)
	}
	if _, err := parseMachineSnap("intr 1 2 3\n", "", nil); err == nil {
		t.Fatal("a stat without a cpu line parsed")
	}
}

func TestParseMachineSnap(t *testing.T) {
	stat := "cpu  100 10 50 1000 20 3 7 5 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n"
	disks := `   7       0 loop0 38958 5324 1044312 12937 95552 136388 9946396 201716 0 55032 246766 0 0 0 0 47349 32113
 254       0 vda 4137326 317696 116929434 4283442 8566827 4090020 2048 6346 0 1525936 11400193 3003117 1164 4096 473 1737279 297018
 254       1 vda1 1 2 3 4 5 6 7 8 0 10 11 12 13 14 15 16 17
`
	m, err := parseMachineSnap(stat, disks, func(n string) bool { return n == "vda" })
	if err != nil {
		t.Fatal(err)
	}
	want := machineSnap{user: 1100 * time.Millisecond, system: 600 * time.Millisecond, iowait: 200 * time.Millisecond,
		steal: 50 * time.Millisecond, written: 2048 * 512, writeTime: 6346 * time.Millisecond,
		discarded: 4096 * 512, discardTime: 473 * time.Millisecond}
	if m != want {
		t.Fatalf("got %+v\nwant %+v", m, want)
	}
	if d := m.since(machineSnap{user: time.Second, written: 1024}); d.user != 100*time.Millisecond || d.written != 2048*512-1024 {
		t.Fatalf("since: %+v", d)
	}
	if _, err := parseMachineSnap("intr 1 2\n", "", nil); err == nil {
		t.Fatal("a /proc/stat without its cpu line parsed")
	}
}
