package main

import (
	"reflect"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

func TestParseDig(t *testing.T) {
	q, err := parseDig([]string{"+tcp", "+noall", "+answer", "+search", "kubernetes.default", "A"})
	if err != nil || !q.tcp || !q.answer || !q.search || q.name != "kubernetes.default" || q.qtype != dnsmessage.TypeA {
		t.Fatalf("parseDig: %+v, %v", q, err)
	}
	q, err = parseDig([]string{"+short", "dns-test-service-3.ns.svc.cluster.local", "CNAME"})
	if err != nil || !q.short || q.qtype != dnsmessage.TypeCNAME {
		t.Fatalf("parseDig +short CNAME: %+v, %v", q, err)
	}
	q, err = parseDig([]string{"+notcp", "+noall", "+answer", "+search", "_http._tcp.svc.ns.svc", "SRV"})
	if err != nil || q.tcp || !q.answer || q.qtype != dnsmessage.TypeSRV {
		t.Fatalf("parseDig SRV: %+v, %v", q, err)
	}
	for _, bad := range [][]string{{}, {"+trace", "x"}, {"a", "b"}} {
		if _, err := parseDig(bad); err == nil {
			t.Errorf("parseDig(%q): no error", bad)
		}
	}
}

func TestCandidates(t *testing.T) {
	c := resolvConf{search: []string{"ns.svc.cluster.local", "svc.cluster.local"}, ndots: 5}
	want := []string{"web.ns.svc.cluster.local", "web.svc.cluster.local", "web"}
	if got := c.candidates("web"); !reflect.DeepEqual(got, want) {
		t.Errorf("candidates(web) = %q, want %q", got, want)
	}
	c.ndots = 1
	want = []string{"a.b", "a.b.ns.svc.cluster.local", "a.b.svc.cluster.local"}
	if got := c.candidates("a.b"); !reflect.DeepEqual(got, want) {
		t.Errorf("candidates(a.b) = %q, want %q", got, want)
	}
	if got := c.candidates("x.y."); !reflect.DeepEqual(got, []string{"x.y."}) {
		t.Errorf("candidates(x.y.) = %q", got)
	}
}
