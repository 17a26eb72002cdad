package network

import (
	"os"
	"reflect"
	"testing"
)

func TestParseNetDev(t *testing.T) {
	data := []byte(`Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:    1000      10    0    0    0     0          0         0     1000      10    0    0    0     0       0          0
  eth0: 753636823   43681    2    3    0     0          0         0  3835003   35505    4    5    0     0       0          0
`)
	got, err := parseNetDev(data)
	if err != nil {
		t.Fatal(err)
	}
	want := []InterfaceStats{{Name: "eth0", RxBytes: 753636823, RxPackets: 43681, RxErrors: 2, RxDropped: 3,
		TxBytes: 3835003, TxPackets: 35505, TxErrors: 4, TxDropped: 5}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("parseNetDev = %+v, want %+v", got, want)
	}
	if _, err := parseNetDev([]byte("x\ny\n  eth0: 1 2 3\n")); err == nil {
		t.Fatal("a short line parsed")
	}
}

// InterfacesIn reads a process's counters only when it is in the namespace named.
func TestInterfacesIn(t *testing.T) {
	pid := uint32(os.Getpid())
	want, err := InterfacesOf(pid)
	if err != nil {
		t.Fatal(err)
	}
	got, err := InterfacesIn(pid, "/proc/self/ns/net")
	if err != nil {
		t.Fatalf("own namespace: %v", err)
	}
	names := func(s []InterfaceStats) []string {
		var out []string
		for _, i := range s {
			out = append(out, i.Name)
		}
		return out
	}
	if !reflect.DeepEqual(names(got), names(want)) {
		t.Fatalf("interfaces %v, /proc/<pid>/net/dev has %v", names(got), names(want))
	}
	if _, err := InterfacesIn(pid, "/proc/self/ns/uts"); err == nil {
		t.Fatal("a namespace other than the process's: no error")
	}
	if _, err := InterfacesIn(pid, "/nonexistent/netns"); err == nil {
		t.Fatal("no pin: no error")
	}
	if _, err := InterfacesIn(1<<22+1, "/proc/self/ns/net"); err == nil {
		t.Fatal("no such process: no error")
	}
}
