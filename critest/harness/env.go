package harness

import (
	"path/filepath"
	"testing"
	"time"
)

// Options configures New. The zero value starts containerd, a CNI network
// and shimd, and checks for leaks at the end.
type Options struct {
	// Containerd options; Dir is set by New.
	Containerd ContainerdOptions
	// CNI options for the network written into shimd's conf dir.
	CNI CNIOptions
	// Shimd options; Dir and ContainerdAddress are set by New. With
	// Shimd.NoCNIConfig no network is written (CNI is then nil).
	Shimd ShimdOptions
	// NoShimd starts only containerd and the CNI network (the network is
	// written to <base>/net.d, which is also the CRI plugin's conf dir when
	// Containerd.WithCRI is set).
	NoShimd bool
	// SkipLeakCheck turns off the leak check New registers.
	SkipLeakCheck bool
	// LeakTimeout for the leak check. Zero: DefaultLeakTimeout.
	LeakTimeout time.Duration
}

// Env is containerd + CNI network + shimd under one base directory.
type Env struct {
	// Base is the private directory holding everything (/tmp/shimd-it-*).
	Base       string
	Tools      Toolset
	Containerd *Containerd
	// CNI is nil when Options.Shimd.NoCNIConfig is set.
	CNI *CNINetwork
	// Shimd is nil when Options.NoShimd is set.
	Shimd *Shimd
	// Namespace is the containerd namespace the leak check inspects: shimd's
	// (one of its own per Env, "shimd-" and 6 hex digits), or "k8s.io" for
	// containerd's own CRI plugin (NoShimd with WithCRI).
	Namespace string
}

// New starts everything for one test. Cleanups run in this order: the leak
// check (unless SkipLeakCheck), shimd stop, containerd cleanup and stop, CNI
// cleanup (iptables rules, bridge), base directory removal.
func New(t testing.TB, opts Options) *Env {
	t.Helper()
	e := &Env{Base: NewBaseDir(t), Tools: Tools(), Namespace: "shimd"}

	// The conf dir shimd will use; also the CRI plugin's when NoShimd.
	confDir := (&Shimd{dir: e.Base}).CNIConfDir()
	if !opts.Shimd.NoCNIConfig {
		e.CNI = WriteCNIConfig(t, confDir, opts.CNI)
	}

	copts := opts.Containerd
	copts.Dir = filepath.Join(e.Base, "c")
	if !opts.NoShimd {
		if opts.Shimd.Namespace == "" {
			opts.Shimd.Namespace = "shimd-" + randHex(3)
		}
		if copts.Namespace == "" {
			copts.Namespace = opts.Shimd.Namespace
		}
	}
	if copts.WithCRI && copts.CNIConfDir == "" {
		copts.CNIConfDir = confDir
	}
	if copts.WithCRI && opts.NoShimd && copts.Namespace == "" {
		copts.Namespace = "k8s.io"
	}
	e.Containerd = StartContainerd(t, copts)
	e.Namespace = e.Containerd.Namespace()

	if !opts.NoShimd {
		sopts := opts.Shimd
		sopts.Dir = e.Base
		sopts.ContainerdAddress = e.Containerd.Address()
		if sopts.RuncRoot == "" {
			// runc's default root is shared by every daemon on the host.
			sopts.RuncRoot = filepath.Join(e.Base, "runc")
		}
		e.Shimd = StartShimd(t, sopts)
		e.Namespace = e.Shimd.Namespace()
	}

	if !opts.SkipLeakCheck {
		timeout := opts.LeakTimeout
		t.Cleanup(func() { e.AssertNoLeaks(t, timeout) })
	}
	return e
}

// LeakCheck describes everything this Env owns, for AssertNoLeaks.
func (e *Env) LeakCheck() LeakCheck {
	return LeakCheck{
		Containerd: e.Containerd,
		Namespace:  e.Namespace,
		Shimd:      e.Shimd,
		CNI:        e.CNI,
		MountRoots: []string{e.Base},
	}
}

// CheckNoLeaks asserts, polling up to DefaultLeakTimeout, that nothing of
// this Env leaked: netns files, mounts under Base, IPAM leases, nat rules,
// containers, active snapshots, shims and their children.
func (e *Env) CheckNoLeaks(t testing.TB) {
	t.Helper()
	e.AssertNoLeaks(t, 0)
}

// AssertNoLeaks is CheckNoLeaks with a timeout (zero: DefaultLeakTimeout).
func (e *Env) AssertNoLeaks(t testing.TB, timeout time.Duration) {
	t.Helper()
	c := e.LeakCheck()
	c.Timeout = timeout
	AssertNoLeaks(t, c)
}
