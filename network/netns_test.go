package network

import (
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
