// Package harness starts real daemons for shimd's integration tests: a
// containerd on a private socket, root and state, a CNI bridge network on a
// private bridge and subnet, and shimd itself, all under one short temporary
// base directory (/tmp/shimd-it-*) so that two runs on the same machine never
// collide. It also checks, at the end of a test, that nothing leaked:
// network namespaces, mounts, IPAM leases, iptables rules, containerd
// containers and snapshots, shims and their children.
//
// Only test code imports this package. Typical use, in a file with the
// `integration` build tag:
//
//	func TestMain(m *testing.M) { harness.Main(m) }
//
//	func TestPod(t *testing.T) {
//		env := harness.New(t, harness.Options{})
//		rt := env.Shimd.Runtime(t)
//		...
//	}
//
// Cleanups are registered with t.Cleanup and run in reverse order: the leak
// check first, then shimd is stopped, then containerd (after it has been asked
// to delete whatever tasks and containers remain), then the CNI bridge and
// iptables rules, and the base directory last.
//
// Binaries come from Tools: containerd 2.4, its runc shim, runc 1.5, crictl
// and critest from $SHIMD_TOOLS/bin (hack/tools.sh builds them), or Debian's
// containerd 1.6 and runc 1.1 when SHIMD_CONTAINERD=1.6. With ShimdOptions.Runsc
// and ContainerdOptions.Runsc, shimd and containerd's CRI plugin also get the runtime
// handler "runsc": gVisor's runsc and containerd-shim-runsc-v1 from the tools
// directory (hack/tools.sh runsc), platform systrap, one options file each
// (WriteRunscConfig); SkipWithoutRunsc skips a test that cannot have them.
//
// Every process the harness stops is one it started, addressed by PID.
package harness
