package main

import (
	"archive/tar"
	"testing"

	"github.com/stretchr/testify/require"
)

// The set holds what "kubeadm config images list" of v1.37.2 prints, but pause
// (in the test image set), and flannel's image.
func TestKubeImagesNames(t *testing.T) {
	var names []string
	for _, k := range kubeImages("v1.37.2", "3.7.0-0", "v1.14.6", "v0.28.10") {
		names = append(names, k.name)
	}
	require.Equal(t, []string{
		"registry.k8s.io/kube-apiserver:v1.37.2",
		"registry.k8s.io/kube-controller-manager:v1.37.2",
		"registry.k8s.io/kube-scheduler:v1.37.2",
		"registry.k8s.io/kube-proxy:v1.37.2",
		"registry.k8s.io/etcd:3.7.0-0",
		"registry.k8s.io/coredns/coredns:v1.14.6",
		"ghcr.io/flannel-io/flannel:v0.28.10",
	}, names)
}

func TestUsrPath(t *testing.T) {
	for in, want := range map[string]string{
		"/lib/x86_64-linux-gnu/libc.so.6":     "/usr/lib/x86_64-linux-gnu/libc.so.6",
		"/lib64/ld-linux-x86-64.so.2":         "/usr/lib64/ld-linux-x86-64.so.2",
		"/usr/sbin/xtables-nft-multi":         "/usr/sbin/xtables-nft-multi",
		"/usr/lib/x86_64-linux-gnu/xtables/x": "/usr/lib/x86_64-linux-gnu/xtables/x",
	} {
		require.Equal(t, want, usrPath(in), in)
	}
}

// On a host with Debian's iptables: the layer has the multi-call binary, its six
// names as hard links, ld.so and libc, and builds.
func TestIptablesEntries(t *testing.T) {
	es, err := iptablesEntries()
	if err != nil {
		t.Skipf("no iptables here: %v", err)
	}
	byPath := map[string]entry{}
	for _, e := range es {
		byPath[e.Path] = e
	}
	require.Equal(t, byte(tar.TypeReg), byPath["usr/sbin/xtables-nft-multi"].Type)
	for _, n := range []string{"iptables", "iptables-save", "iptables-restore", "ip6tables"} {
		require.Equal(t, byte(tar.TypeLink), byPath["usr/sbin/"+n].Type, n)
	}
	require.Equal(t, byte(tar.TypeSymlink), byPath["lib"].Type)
	require.Contains(t, byPath, "usr/lib/x86_64-linux-gnu/libc.so.6")
	_, err = buildLayer("iptables", es)
	require.NoError(t, err)
}
