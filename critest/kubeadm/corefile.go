package kubeadm

import "strings"

// dropForward removes the forward block ("forward . /etc/resolv.conf {" up to
// its "}", or a one-line forward) from the Corefile's lines.
func dropForward(lines []string) []string {
	var out []string
	depth := 0
	for _, l := range lines {
		s := strings.TrimSpace(l)
		switch {
		case depth > 0:
			if strings.HasPrefix(s, "}") {
				depth--
			}
		case strings.HasPrefix(s, "forward "):
			if strings.HasSuffix(s, "{") {
				depth = 1
			}
		default:
			out = append(out, l)
		}
	}
	return out
}
