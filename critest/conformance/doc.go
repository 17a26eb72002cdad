// Package conformance runs critest, the CRI validation suite of cri-tools,
// against a real shimd started by critest/harness on containerd, runc and a
// CNI bridge network, fully offline: the images come from the local registry
// (critest/images) through hosts.toml mirrors that never fall through to a
// real registry.
//
// The runner itself is TestCritest in critest_integration_test.go (build tag
// `integration`, root). This package's plain files hold the pure parts: the
// skip list parser (critest/skip), the critest command line, and the parser
// of ginkgo's summary; `go test ./critest/conformance/` covers them without
// root. See critest/README.md for how to run it.
package conformance
