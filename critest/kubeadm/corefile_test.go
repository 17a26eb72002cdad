package kubeadm

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// kubeadm v1.37.2's Corefile (cmd/kubeadm/app/phases/addons/dns/manifests.go).
const kubeadmCorefile = `.:53 {
    errors
    health {
       lameduck 5s
    }
    ready
    kubernetes cluster.local in-addr.arpa ip6.arpa {
       pods insecure
       fallthrough in-addr.arpa ip6.arpa
       ttl 30
    }
    prometheus :9153
    forward . /etc/resolv.conf {
       max_concurrent 1000
    }
    cache 30 {
       disable success cluster.local
       disable denial cluster.local
    }
    loop
    reload
    loadbalance
}`

func TestDropForward(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{
		{"block", kubeadmCorefile, strings.Replace(kubeadmCorefile, "    forward . /etc/resolv.conf {\n       max_concurrent 1000\n    }\n", "", 1)},
		{"one line", ".:53 {\n    errors\n    forward . 8.8.8.8\n    cache 30\n}", ".:53 {\n    errors\n    cache 30\n}"},
		{"none", ".:53 {\n    errors\n}", ".:53 {\n    errors\n}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := strings.Join(dropForward(strings.Split(tc.in, "\n")), "\n")
			require.Equal(t, tc.want, got)
			require.NotContains(t, got, "forward")
		})
	}
}
