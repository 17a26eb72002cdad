package harness

import (
	"net"
	"strconv"
	"testing"
)

func TestPortRange(t *testing.T) {
	for _, tt := range []struct {
		elo, ehi, lo, hi int
	}{
		{32768, 60999, 22768, 32768}, // Linux's default: below
		{5000, 50000, 50001, 60001},  // no room below: above
		{1024, 65535, 0, 0},          // no room: none
	} {
		lo, hi := portRange(tt.elo, tt.ehi)
		if lo != tt.lo || hi != tt.hi {
			t.Errorf("portRange(%d, %d) = [%d, %d), want [%d, %d)", tt.elo, tt.ehi, lo, hi, tt.lo, tt.hi)
		}
	}
}

// FreeTCPPort never returns a port of the ephemeral range, nor one twice, nor
// one something listens on.
func TestFreeTCPPort(t *testing.T) {
	elo, ehi := readEphemeralRange()
	busy, err := FreeTCPPort()
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(busy))
	if err != nil {
		t.Fatalf("the port FreeTCPPort gave, %d, cannot be bound: %v", busy, err)
	}
	defer l.Close()
	seen := map[int]bool{busy: true}
	for i := 0; i < 300; i++ {
		p, err := FreeTCPPort()
		if err != nil {
			t.Fatal(err)
		}
		if p >= elo && p <= ehi {
			t.Fatalf("port %d is in the ephemeral range [%d, %d]", p, elo, ehi)
		}
		if seen[p] {
			t.Fatalf("port %d given twice (or while listened on)", p)
		}
		seen[p] = true
	}
}
