package network

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"github.com/containerd/containerd/v2/pkg/sys"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/shimd/shimd/pod"
)

// NetNSPath is where the network namespace of the pod with this id is pinned. It is a
// pure function of the id so that recovery can find (and remove) a namespace even when
// the record of a half-created pod never said where it was.
func NetNSPath(baseDir, id string) string {
	return filepath.Join(baseDir, id)
}

// CreateNetNS creates a new network namespace and pins it with a bind mount at path.
// The path must not exist yet.
func CreateNetNS(path string) error { return Pin(PinRequest{NetNS: path}) }

// PinRequest is what Pin makes: each non-empty path gets a new namespace
// of its kind pinned there.
type PinRequest struct {
	NetNS, IPCNS, UTSNS string
	// Hostname is set in the new UTS namespace; Sysctls (dotted names) are written in
	// the new namespaces.
	Hostname string
	Sysctls  map[string]string
}

// Pin makes new namespaces (those of a pause-less pod, or a pod's network
// namespace) on a locked OS thread and pins them by bind mounts; the thread then
// returns to its own namespaces. On failure nothing is left pinned.
func Pin(req PinRequest) (err error) {
	kinds := []pinKind{{req.NetNS, "net", unix.CLONE_NEWNET}, {req.IPCNS, "ipc", unix.CLONE_NEWIPC}, {req.UTSNS, "uts", unix.CLONE_NEWUTS}}
	flags := 0
	var made []string
	defer func() {
		if err != nil {
			for _, p := range made {
				_ = RemoveNetNS(p)
			}
		}
	}()
	for _, k := range kinds {
		if k.path == "" {
			continue
		}
		flags |= k.flag
		if err := os.MkdirAll(filepath.Dir(k.path), 0o711); err != nil {
			return fmt.Errorf("create %s namespace dir: %w", k.ns, err)
		}
		f, err := os.OpenFile(k.path, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
		if err != nil {
			return fmt.Errorf("create %s namespace mount point: %w", k.ns, err)
		}
		f.Close()
		made = append(made, k.path)
	}
	if flags == 0 {
		return nil
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// The thread goes back to its own namespaces afterwards and is unlocked only
		// if every one of them is restored; else it dies with this goroutine. A thread
		// that dies sends its Pdeathsig to every child it started, so a thread must not
		// die needlessly in a process that starts daemons.
		orig, err := openOwnNamespaces(kinds)
		if err != nil {
			errc <- err
			return
		}
		defer func() {
			if restoreNamespaces(orig) {
				runtime.UnlockOSThread()
			}
		}()
		if err := unix.Unshare(flags); err != nil {
			errc <- fmt.Errorf("unshare pod namespaces: %w", err)
			return
		}
		if req.UTSNS != "" && req.Hostname != "" {
			if err := unix.Sethostname([]byte(req.Hostname)); err != nil {
				errc <- fmt.Errorf("set hostname %q: %w", req.Hostname, err)
				return
			}
		}
		for k, v := range req.Sysctls {
			if err := os.WriteFile(pod.SysctlPath(k), []byte(v), 0); err != nil {
				errc <- fmt.Errorf("set sysctl %s: %w", k, err)
				return
			}
		}
		tid := strconv.Itoa(unix.Gettid())
		for _, k := range kinds {
			if k.path == "" {
				continue
			}
			src := "/proc/self/task/" + tid + "/ns/" + k.ns
			if err := unix.Mount(src, k.path, "none", unix.MS_BIND, ""); err != nil {
				errc <- fmt.Errorf("pin %s namespace at %s: %w", k.ns, k.path, err)
				return
			}
		}
		errc <- nil
	}()
	return <-errc
}

// pinKind is one namespace Pin makes: where to pin it, its /proc name and its
// clone flag.
type pinKind struct {
	path, ns string
	flag     int
}

// ownNamespace is a namespace the calling thread had before Pin unshared it.
type ownNamespace struct {
	f    *os.File
	flag int
}

// openOwnNamespaces opens the calling thread's namespaces of the kinds asked for.
func openOwnNamespaces(kinds []pinKind) ([]ownNamespace, error) {
	var out []ownNamespace
	for _, k := range kinds {
		if k.path == "" {
			continue
		}
		f, err := os.Open("/proc/thread-self/ns/" + k.ns)
		if err != nil {
			for _, o := range out {
				o.f.Close()
			}
			return nil, fmt.Errorf("open own %s namespace: %w", k.ns, err)
		}
		out = append(out, ownNamespace{f: f, flag: k.flag})
	}
	return out, nil
}

// restoreNamespaces moves the calling thread back into its own namespaces and
// tells whether all of them were restored.
func restoreNamespaces(own []ownNamespace) bool {
	ok := true
	for _, o := range own {
		if err := unix.Setns(int(o.f.Fd()), o.flag); err != nil {
			ok = false
		}
		o.f.Close()
	}
	return ok
}

// CreateNetNSInUserns creates a network namespace owned by a new user namespace with
// the given mappings ("containerID:hostID:size"), and pins the network namespace at
// path and the user namespace at usernsPath. Neither path may exist yet.
func CreateNetNSInUserns(path, usernsPath, uidMap, gidMap string) (err error) {
	for _, p := range []string{path, usernsPath} {
		if err := os.MkdirAll(filepath.Dir(p), 0o711); err != nil {
			return fmt.Errorf("create namespace dir: %w", err)
		}
		f, err := os.OpenFile(p, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
		if err != nil {
			return fmt.Errorf("create namespace mount point: %w", err)
		}
		f.Close()
	}
	defer func() {
		if err != nil {
			RemoveNetNS(path)
			RemoveNetNS(usernsPath)
		}
	}()
	return sys.UnshareAfterEnterUserns(uidMap, gidMap, unix.CLONE_NEWNET, func(pid int) error {
		for _, m := range [][2]string{{"net", path}, {"user", usernsPath}} {
			src := fmt.Sprintf("/proc/%d/ns/%s", pid, m[0])
			if err := unix.Mount(src, m[1], "none", unix.MS_BIND, ""); err != nil {
				return fmt.Errorf("pin %s at %s: %w", src, m[1], err)
			}
		}
		return nil
	})
}

// RemoveNetNS unmounts and removes a pinned namespace (network or user). A missing
// one is fine.
func RemoveNetNS(path string) error {
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount netns %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove netns %s: %w", path, err)
	}
	return nil
}

// nsfsMagic is the f_type of a namespace file (NSFS_MAGIC).
const nsfsMagic = 0x6e736673

// IsNamespace tells whether path is a live namespace file: a pin still mounted, or a
// /proc ns link. A pin whose bind mount is gone (a daemon killed between the unmount
// and the remove of RemoveNetNS) is a plain file and is not.
func IsNamespace(path string) bool {
	var st unix.Statfs_t
	return unix.Statfs(path, &st) == nil && st.Type == nsfsMagic
}

// InNetNS runs fn on an OS thread that has entered the network namespace at path.
func InNetNS(path string, fn func() error) error {
	ns, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("open netns %s: %w", path, err)
	}
	defer ns.Close()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			errc <- err
			return
		}
		defer orig.Close()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("enter netns %s: %w", path, err)
			return
		}
		ferr := fn()
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err == nil {
			runtime.UnlockOSThread()
		}
		errc <- ferr
	}()
	return <-errc
}

// loopbackUp sets the loopback interface of the namespace at path up. The
// loopback device of every network namespace has index 1 (LOOPBACK_IFINDEX), so it is
// not looked up by name first: a lookup is one more wait for the RTNL lock, which a
// burst of pod network setups holds most of the time.
func loopbackUp(path string) error {
	return InNetNS(path, func() error {
		lo := &netlink.Device{LinkAttrs: netlink.LinkAttrs{Index: loopbackIndex, Name: "lo"}}
		if err := netlink.LinkSetUp(lo); err != nil {
			return fmt.Errorf("set loopback up: %w", err)
		}
		return nil
	})
}

// loopbackIndex is the index of the loopback device in every network namespace.
const loopbackIndex = 1

// InterfaceStats are the counters of one interface of a pod.
type InterfaceStats struct {
	Name                                    string
	RxBytes, RxErrors, RxPackets, RxDropped uint64
	TxBytes, TxErrors, TxPackets, TxDropped uint64
}

// Interfaces returns the counters of every non-loopback interface in the namespace.
func Interfaces(path string) ([]InterfaceStats, error) {
	var out []InterfaceStats
	err := InNetNS(path, func() error {
		links, err := netlink.LinkList()
		if err != nil {
			return err
		}
		for _, l := range links {
			a := l.Attrs()
			if a.Name == "lo" || a.Statistics == nil {
				continue
			}
			st := a.Statistics
			out = append(out, InterfaceStats{Name: a.Name,
				RxBytes: st.RxBytes, RxErrors: st.RxErrors, RxPackets: st.RxPackets, RxDropped: st.RxDropped,
				TxBytes: st.TxBytes, TxErrors: st.TxErrors, TxPackets: st.TxPackets, TxDropped: st.TxDropped})
		}
		return nil
	})
	return out, err
}

// InterfacesOf is Interfaces of the network namespace process pid is in, read from
// /proc/<pid>/net/dev (the kernel's same counters) without entering the namespace.
func InterfacesOf(pid uint32) ([]InterfaceStats, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/dev", pid))
	if err != nil {
		return nil, err
	}
	return parseNetDev(data)
}

// InterfacesIn is InterfacesOf pid when pid is in the network namespace pinned at
// path (a pause-less pod's, whose containers join it): the process's /proc
// directory is opened first and both its namespace and its counters are read through
// it, so a pid that exits and is reused in between reads nothing (ESRCH) rather than
// another namespace's counters. An error when pid is elsewhere or gone.
func InterfacesIn(pid uint32, path string) ([]InterfaceStats, error) {
	var want unix.Stat_t
	if err := unix.Stat(path, &want); err != nil {
		return nil, fmt.Errorf("stat netns %s: %w", path, err)
	}
	dir, err := unix.Open(fmt.Sprintf("/proc/%d", pid), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open /proc/%d: %w", pid, err)
	}
	defer unix.Close(dir)
	var got unix.Stat_t
	if err := unix.Fstatat(dir, "ns/net", &got, 0); err != nil {
		return nil, fmt.Errorf("netns of pid %d: %w", pid, err)
	}
	if got.Dev != want.Dev || got.Ino != want.Ino {
		return nil, fmt.Errorf("pid %d is not in the network namespace %s", pid, path)
	}
	fd, err := unix.Openat(dir, "net/dev", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open /proc/%d/net/dev: %w", pid, err)
	}
	f := os.NewFile(uintptr(fd), "net/dev")
	defer f.Close()
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("read /proc/%d/net/dev: %w", pid, err)
	}
	return parseNetDev(data)
}

// parseNetDev reads /proc/net/dev: two header lines, then "name: " and 16 counters,
// the receive ones (bytes packets errs drop fifo frame compressed multicast), then
// the transmit ones (bytes packets errs drop fifo colls carrier compressed).
func parseNetDev(data []byte) ([]InterfaceStats, error) {
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) < 2 {
		return nil, fmt.Errorf("net/dev: %d lines", len(lines))
	}
	var out []InterfaceStats
	for _, line := range lines[2:] {
		name, rest, ok := strings.Cut(line, ":")
		name = strings.TrimSpace(name)
		f := strings.Fields(rest)
		if !ok || len(f) < 16 {
			return nil, fmt.Errorf("net/dev line %q", line)
		}
		if name == "lo" {
			continue
		}
		var n [16]uint64
		for i := range n {
			v, err := strconv.ParseUint(f[i], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("net/dev line %q: %w", line, err)
			}
			n[i] = v
		}
		out = append(out, InterfaceStats{Name: name,
			RxBytes: n[0], RxPackets: n[1], RxErrors: n[2], RxDropped: n[3],
			TxBytes: n[8], TxPackets: n[9], TxErrors: n[10], TxDropped: n[11]})
	}
	return out, nil
}
