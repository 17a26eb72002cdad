package harness

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// A port for a process a test starts (a kubelet, an apiserver, a registry) is
// chosen here and bound there, later: between the two, anything else on the
// machine may take it. Ports the kernel hands out by itself (the source port of
// every connect(), a bind to port 0) come from net.ipv4.ip_local_port_range,
// 32768-60999 by default, and the suites make thousands of loopback connections
// while they run in parallel packages; a kubelet whose port was taken so exits
// with "bind: address already in use" (seen in CI). So the ports handed out here
// lie below that range, where the kernel never picks one, and none twice in one
// test process.

const portSpan = 10000 // how many ports below the ephemeral range to choose from

var ports struct {
	sync.Mutex
	lo, hi int // [lo, hi): the span to choose from; hi == 0 before the first call
	given  map[int]bool
}

// FreeTCPPort returns a TCP port that nothing listens on, neither on
// 127.0.0.1 nor on any other address, outside the kernel's ephemeral range and
// not returned before by this process.
func FreeTCPPort() (int, error) {
	ports.Lock()
	defer ports.Unlock()
	if ports.hi == 0 {
		ports.lo, ports.hi = portRange(readEphemeralRange())
		ports.given = map[int]bool{}
	}
	if ports.hi <= ports.lo { // no room outside the ephemeral range: the kernel's pick
		return kernelPort()
	}
	for i := 0; i < 200; i++ {
		p := ports.lo + rand.IntN(ports.hi-ports.lo)
		if ports.given[p] || !bindable(p) {
			continue
		}
		ports.given[p] = true
		return p, nil
	}
	return 0, fmt.Errorf("no free TCP port in [%d, %d) after 200 tries", ports.lo, ports.hi)
}

// portRange is the span below the ephemeral range [elo, ehi], or above it when
// there is no room below; lo == hi when there is none.
func portRange(elo, ehi int) (lo, hi int) {
	const floor = 1024 // never the privileged ports
	if elo-portSpan >= floor {
		return elo - portSpan, elo
	}
	if ehi+1+portSpan <= 65536 {
		return ehi + 1, ehi + 1 + portSpan
	}
	return 0, 0
}

// readEphemeralRange reads net.ipv4.ip_local_port_range (Linux's default when
// unreadable).
func readEphemeralRange() (lo, hi int) {
	lo, hi = 32768, 60999
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return lo, hi
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return lo, hi
	}
	l, err1 := strconv.Atoi(f[0])
	h, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil || l > h {
		return lo, hi
	}
	return l, h
}

// bindable reports whether a listener can take port p on every IPv4 address
// (so on 127.0.0.1 and on a node IP too).
func bindable(p int) bool {
	l, err := net.Listen("tcp4", ":"+strconv.Itoa(p))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

func kernelPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// AddrInUse reports whether a process's log says it could not bind its port.
func AddrInUse(log string) bool {
	return strings.Contains(log, "address already in use")
}
