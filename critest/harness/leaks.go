package harness

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/pkg/namespaces"
)

// DefaultLeakTimeout is how long AssertNoLeaks polls before it reports.
const DefaultLeakTimeout = 20 * time.Second

// LeakCheck says what AssertNoLeaks inspects; nil fields are skipped.
type LeakCheck struct {
	// Containerd: no containers, leases, sandbox store records (2.x), or active or view snapshots in
	// Namespace, no cgroup under /<Namespace> in any hierarchy; no mounts
	// under its root or state; no process (other than
	// the daemons) whose command line names its address or directory, such
	// as a shim, nor any descendant of one (pause, runc, workloads).
	Containerd *Containerd
	// Namespace in containerd. Empty: Containerd.Namespace().
	Namespace string
	// Shimd: no files in its netns dir, no mounts under its root or state
	// dir, no process other than shimd naming its directory.
	Shimd *Shimd
	// CNI: no host-local lease files in its data dir, no iptables nat rules
	// referring to its subnet.
	CNI *CNINetwork
	// MountRoots are further directories that must hold no mounts.
	MountRoots []string
	// Timeout for polling. Zero: DefaultLeakTimeout.
	Timeout time.Duration
}

// AssertNoLeaks polls until nothing has leaked or the timeout passes, then
// reports each leak with t.Errorf.
func AssertNoLeaks(t testing.TB, c LeakCheck) {
	t.Helper()
	timeout := c.Timeout
	if timeout == 0 {
		timeout = DefaultLeakTimeout
	}
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		leaks := FindLeaks(ctx, c)
		cancel()
		if len(leaks) == 0 {
			return
		}
		if time.Now().After(deadline) {
			msg := fmt.Sprintf("harness: leaked after waiting %s:\n  - %s", timeout, strings.Join(leaks, "\n  - "))
			if s := c.Shimd; s != nil {
				msg += "\n" + logLinesAbout(s.LogPath(), leaks, 15)
			}
			if cd := c.Containerd; cd != nil {
				msg += "\n" + logLinesAbout(cd.LogPath(), leaks, 10)
			}
			Errorf(t, "%s", strings.TrimRight(msg, "\n"))
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// FindLeaks makes one pass of the checks in c and describes each leak found
// (or check that could not run).
func FindLeaks(ctx context.Context, c LeakCheck) []string {
	var leaks []string
	add := func(format string, args ...any) { leaks = append(leaks, fmt.Sprintf(format, args...)) }

	var mountRoots, markers []string
	var daemonPIDs []int
	allowed := map[string]bool{} // mount points that are not leaks
	mountRoots = append(mountRoots, c.MountRoots...)
	if cd := c.Containerd; cd != nil {
		mountRoots = append(mountRoots, cd.Root(), cd.State())
		markers = append(markers, cd.Address(), cd.Dir())
		daemonPIDs = append(daemonPIDs, cd.PID())
		if cd.PID() == 0 {
			add("containerd is not running: cannot check containers and snapshots")
		} else {
			ns := or(c.Namespace, cd.Namespace())
			leaks = append(leaks, containerdLeaks(ctx, cd, ns)...)
			// /k8s.io is shared by every containerd with its CRI plugin on the host (the
			// comparisons run beside each other), so its cgroups cannot be told apart.
			if ns != "k8s.io" {
				leaks = append(leaks, cgroupLeaks(ns)...)
			}
		}
	}
	if s := c.Shimd; s != nil {
		mountRoots = append(mountRoots, s.RootDir(), s.StateDir())
		markers = append(markers, s.dir)
		// A runtime may bind its netns directory onto itself (as "ip netns"
		// does) to make it a shared mount; that one mount is not a leak.
		allowed[s.NetnsDir()] = true
		daemonPIDs = append(daemonPIDs, s.PID())
		for _, dir := range s.PinDirs() {
			if ents, err := os.ReadDir(dir); err == nil {
				for _, e := range ents {
					add("pinned namespace file %s", filepath.Join(dir, e.Name()))
				}
			} else if !os.IsNotExist(err) {
				add("cannot read %s: %v", dir, err)
			}
		}
	}
	if n := c.CNI; n != nil {
		leaks = append(leaks, cniLeaks(n)...)
	}
	for _, root := range dedupeRoots(mountRoots) {
		ms, err := mountsUnder(root)
		if err != nil {
			add("cannot read mountinfo: %v", err)
			break
		}
		for _, m := range ms {
			if !allowed[m.Point] && !isBaseMount(m.Point) && !runscNullNetNS(m) {
				add("mount %s", m)
			}
		}
	}
	if len(markers) > 0 {
		ps, err := processesMatching(markers, daemonPIDs)
		if err != nil {
			add("cannot list processes: %v", err)
		}
		for _, p := range ps {
			add("process %s", p)
		}
	}
	return leaks
}

// runscNullNetNS is runsc's pinned empty network namespace for its gofers,
// <runsc root>/<namespace>/null-netns: one per runsc root, made by the first sandbox
// and kept for every later one (runsc never removes it; the harness unmounts it with
// the base directory). Not a pod's leak.
func runscNullNetNS(m mount) bool {
	return m.FSType == "nsfs" && filepath.Base(m.Point) == "null-netns" &&
		filepath.Base(filepath.Dir(filepath.Dir(m.Point))) == "runsc"
}

// containerdLeaks lists containers and non-committed snapshots in ns.
func containerdLeaks(ctx context.Context, cd *Containerd, ns string) []string {
	var leaks []string
	cl, err := client.New(cd.Address(), client.WithTimeout(5*time.Second))
	if err != nil {
		return []string{fmt.Sprintf("containerd client: %v", err)}
	}
	defer cl.Close()
	ctx = namespaces.WithNamespace(ctx, ns)
	ctrs, err := cl.ContainerService().List(ctx)
	if err != nil {
		leaks = append(leaks, fmt.Sprintf("cannot list containers in %s: %v", ns, err))
	}
	for _, ctr := range ctrs {
		leaks = append(leaks, fmt.Sprintf("containerd container %s/%s (image %q, snapshot %s/%s, labels %v)",
			ns, ctr.ID, ctr.Image, ctr.Snapshotter, ctr.SnapshotKey, ctr.Labels))
	}
	ls, err := cl.LeasesService().List(ctx)
	if err != nil {
		leaks = append(leaks, fmt.Sprintf("cannot list leases in %s: %v", ns, err))
	}
	for _, l := range ls {
		leaks = append(leaks, fmt.Sprintf("lease %s/%s (created %s, labels %v)", ns, l.ID, l.CreatedAt.Format(time.RFC3339), l.Labels))
	}
	if cd.MajorVersion() >= 2 {
		sbs, err := cl.SandboxStore().List(ctx)
		if err != nil {
			leaks = append(leaks, fmt.Sprintf("cannot list the sandbox store in %s: %v", ns, err))
		}
		for _, sb := range sbs {
			leaks = append(leaks, fmt.Sprintf("sandbox store record %s/%s (labels %v)", ns, sb.ID, sb.Labels))
		}
	}
	for _, sn := range snapshotters(ctx, cl) {
		err := cl.SnapshotService(sn).Walk(ctx, func(_ context.Context, info snapshots.Info) error {
			// Committed snapshots are image layers; active and view ones
			// are container filesystems.
			if info.Kind != snapshots.KindCommitted {
				leaks = append(leaks, fmt.Sprintf("%s snapshot %s/%s %q (parent %q)", info.Kind, ns, sn, info.Name, info.Parent))
			}
			return nil
		})
		if err != nil {
			leaks = append(leaks, fmt.Sprintf("cannot walk %s snapshots in %s: %v", sn, ns, err))
		}
	}
	return leaks
}

// snapshotters lists the snapshotter plugins that loaded; overlayfs if
// introspection fails.
func snapshotters(ctx context.Context, cl *client.Client) []string {
	resp, err := cl.IntrospectionService().Plugins(ctx, `type=="io.containerd.snapshotter.v1"`)
	if err != nil {
		return []string{"overlayfs"}
	}
	var out []string
	for _, p := range resp.Plugins {
		if p.InitErr == nil {
			out = append(out, p.ID)
		}
	}
	return out
}

// cniLeaks lists host-local lease files and nat rules for the network.
func cniLeaks(n *CNINetwork) []string {
	var leaks []string
	dirs, _ := os.ReadDir(n.DataDir)
	for _, d := range dirs {
		if !d.IsDir() {
			continue
		}
		files, _ := os.ReadDir(filepath.Join(n.DataDir, d.Name()))
		for _, f := range files {
			if net.ParseIP(f.Name()) != nil {
				b, _ := os.ReadFile(filepath.Join(n.DataDir, d.Name(), f.Name()))
				leaks = append(leaks, fmt.Sprintf("IPAM lease %s in network %s (owner %q)",
					f.Name(), d.Name(), strings.Join(strings.Fields(string(b)), " ")))
			}
		}
	}
	if n.Subnet != nil {
		rules, chains, err := natRulesFor(n.Subnet)
		if err != nil {
			leaks = append(leaks, fmt.Sprintf("cannot list iptables nat rules: %v", err))
		}
		for _, r := range rules {
			leaks = append(leaks, "iptables nat rule "+r.Line)
		}
		for _, c := range chains {
			leaks = append(leaks, "iptables nat chain "+c)
		}
	}
	return leaks
}

// dedupeRoots drops directories that lie inside another one in the list.
func dedupeRoots(roots []string) []string {
	clean := make([]string, 0, len(roots))
	for _, r := range roots {
		if r != "" {
			clean = append(clean, filepath.Clean(r))
		}
	}
	sort.Strings(clean)
	var out []string
	for _, r := range clean {
		if len(out) > 0 {
			last := out[len(out)-1]
			if r == last || strings.HasPrefix(r, last+"/") {
				continue
			}
		}
		out = append(out, r)
	}
	return out
}

// leakKinds are the kinds a leak report counts, in the order it prints them; each
// says which of FindLeaks' descriptions are its own (the first that matches wins).
var leakKinds = []struct {
	name  string
	match func(string) bool
}{
	{"netns", func(l string) bool {
		return strings.HasPrefix(l, "pinned namespace file") || strings.HasPrefix(l, "mount ") && strings.Contains(l, " (nsfs ")
	}},
	{"IP leases", func(l string) bool { return strings.HasPrefix(l, "IPAM lease") }},
	{"mounts", func(l string) bool { return strings.HasPrefix(l, "mount ") }},
	{"cgroups", func(l string) bool { return strings.HasPrefix(l, "cgroup ") }},
	{"shims and other processes", func(l string) bool { return strings.HasPrefix(l, "process ") }},
	{"containers", func(l string) bool {
		return strings.HasPrefix(l, "containerd container") || strings.HasPrefix(l, "sandbox store record")
	}},
	{"leases", func(l string) bool { return strings.HasPrefix(l, "lease ") }},
	{"snapshots", func(l string) bool { return strings.Contains(l, " snapshot ") && !strings.HasPrefix(l, "cannot") }},
}

// leakCheckFailed is the kind of a description no kind claims: a check that could
// not run ("cannot list ...").
const leakCheckFailed = "checks that failed"

// LeakCounts counts FindLeaks' descriptions by kind: every kind is in the map, zero
// or not.
func LeakCounts(leaks []string) map[string]int {
	counts := map[string]int{leakCheckFailed: 0}
	for _, k := range leakKinds {
		counts[k.name] += 0
	}
	for _, l := range leaks {
		kind := leakCheckFailed
		for _, k := range leakKinds {
			if k.match(l) {
				kind = k.name
				break
			}
		}
		counts[kind]++
	}
	return counts
}

// FormatLeakCounts prints LeakCounts in leakKinds' order: "netns 0, IP leases 0, ...".
func FormatLeakCounts(counts map[string]int) string {
	var parts []string
	for _, k := range leakKinds {
		parts = append(parts, fmt.Sprintf("%s %d", k.name, counts[k.name]))
	}
	return strings.Join(append(parts, fmt.Sprintf("%s %d", leakCheckFailed, counts[leakCheckFailed])), ", ")
}
