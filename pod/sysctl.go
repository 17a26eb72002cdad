package pod

import "strings"

// NormalizeSysctlName turns a sysctl name with '/' separators into the dotted form
// runc expects, as the kubelet does (k8s.io/component-helpers NormalizeName): if the
// first separator is '/', every '/' becomes '.' and every '.' becomes '/'
// ("net/ipv4/conf/eno2.100/rp_filter" is "net.ipv4.conf.eno2/100.rp_filter").
func NormalizeSysctlName(name string) string {
	i := strings.IndexAny(name, "./")
	if i == -1 || name[i] == '.' {
		return name
	}
	return swapDotsSlashes(name)
}

// swapDotsSlashes turns every '.' into '/' and every '/' into '.'.
func swapDotsSlashes(s string) string {
	return strings.Map(func(r rune) rune {
		switch r {
		case '.':
			return '/'
		case '/':
			return '.'
		}
		return r
	}, s)
}

// SysctlPath is the /proc/sys file of a dotted sysctl name: '.' separates, a '/' is
// a dot inside a segment.
func SysctlPath(name string) string { return "/proc/sys/" + swapDotsSlashes(name) }
