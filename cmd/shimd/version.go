package main

import (
	"strings"

	utilversion "k8s.io/apimachinery/pkg/util/version"
)

// baseVersion is the release this source is, before build metadata.
const baseVersion = "0.1.0-dev"

// version is set at build time with -ldflags "-X main.version=..." (the Makefile
// gives `git describe`'s output, or baseVersion+commit where the history has no tag).
var version = baseVersion

// runtimeVersion is the version Version reports: the kubelet parses it as a
// semantic version and shows "Unknown" in the node's containerRuntimeVersion when it
// cannot (a bare commit id, "72d7b6a-dirty", made the guest node of critest/kubeadm
// report shimd://Unknown). Anything else becomes baseVersion with v as build metadata.
func runtimeVersion(v string) string {
	if _, err := utilversion.ParseSemantic(v); err == nil {
		return v
	}
	meta := strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r == '-' || r == '.' {
			return r
		}
		return '-'
	}, v)
	meta = strings.Trim(strings.ReplaceAll(meta, "..", "."), ".")
	if meta == "" {
		return baseVersion
	}
	return baseVersion + "+" + meta
}
