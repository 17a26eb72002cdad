package sandbox

import (
	"strconv"
	"strings"

	"github.com/shimd/shimd/network"
)

// Pod annotations the kubelet's bandwidth shaping uses.
const (
	annotationIngressBandwidth = "kubernetes.io/ingress-bandwidth"
	annotationEgressBandwidth  = "kubernetes.io/egress-bandwidth"
)

// bandwidth reads the pod's bandwidth annotations (Kubernetes quantities such as 10M
// or 1Gi) into the CNI bandwidth capability; nil when there are none.
func bandwidth(annotations map[string]string) *network.Bandwidth {
	in, inOK := parseQuantity(annotations[annotationIngressBandwidth])
	out, outOK := parseQuantity(annotations[annotationEgressBandwidth])
	if !inOK && !outOK {
		return nil
	}
	// As the kubelet's shaper does: burst is effectively unlimited.
	const burst = 1<<31 - 1
	bw := &network.Bandwidth{}
	if inOK {
		bw.IngressRate, bw.IngressBurst = in, burst
	}
	if outOK {
		bw.EgressRate, bw.EgressBurst = out, burst
	}
	return bw
}

// parseQuantity parses a decimal or binary-suffixed quantity (k, M, G, T, Ki, Mi, Gi, Ti).
func parseQuantity(s string) (uint64, bool) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, false
	}
	mult := uint64(1)
	for _, suf := range []struct {
		s string
		m uint64
	}{{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40}, {"k", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}} {
		if strings.HasSuffix(s, suf.s) {
			s, mult = strings.TrimSuffix(s, suf.s), suf.m
			break
		}
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v <= 0 {
		return 0, false
	}
	return uint64(v * float64(mult)), true
}
