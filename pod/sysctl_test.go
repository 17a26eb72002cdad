package pod

import "testing"

func TestNormalizeSysctlName(t *testing.T) {
	for in, want := range map[string]string{
		"net.ipv4.ip_forward":              "net.ipv4.ip_forward",
		"net/ipv4/ip_forward":              "net.ipv4.ip_forward",
		"net/ipv4/conf/eno2.100/rp_filter": "net.ipv4.conf.eno2/100.rp_filter",
		"net.ipv4.conf.eno2/100.rp_filter": "net.ipv4.conf.eno2/100.rp_filter",
		"kernel":                           "kernel",
	} {
		if got := NormalizeSysctlName(in); got != want {
			t.Errorf("NormalizeSysctlName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestSysctlPath(t *testing.T) {
	if got := SysctlPath("net.ipv4.conf.eno2/100.rp_filter"); got != "/proc/sys/net/ipv4/conf/eno2.100/rp_filter" {
		t.Fatalf("got %q", got)
	}
}
