//go:build integration

package kubeadm

import (
	"testing"

	"github.com/shimd/shimd/critest/harness"
)

// TestMain removes the shimd binary the harness builds for the nodes when the tests
// end (without it, every run left 37 MB in /tmp/shimd-bin-*).
func TestMain(m *testing.M) { harness.Main(m) }
