package network

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"

	"github.com/containerd/containerd/v2/pkg/sys"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// NetNSPath is where the network namespace of the pod with this id is pinned. It is a
// pure function of the id so that recovery can find (and remove) a namespace even when
// the record of a half-created pod never said where it was.
func NetNSPath(baseDir, id string) string {
	return filepath.Join(baseDir, id)
}

// CreateNetNS creates a new network namespace and pins it with a bind mount at path.
// The path must not exist yet.
func CreateNetNS(path string) (err error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o711); err != nil {
		return fmt.Errorf("create netns dir: %w", err)
	}
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return fmt.Errorf("create netns mount point: %w", err)
	}
	f.Close()
	defer func() {
		if err != nil {
			os.Remove(path)
		}
	}()

	errc := make(chan error, 1)
	go func() {
		// The thread that unshares is never unlocked: it dies with this goroutine, so no
		// other goroutine ever runs in the new namespace even if restoring fails.
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			errc <- err
			return
		}
		defer orig.Close()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("unshare netns: %w", err)
			return
		}
		src := "/proc/self/task/" + strconv.Itoa(unix.Gettid()) + "/ns/net"
		mountErr := unix.Mount(src, path, "none", unix.MS_BIND, "")
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err == nil {
			runtime.UnlockOSThread()
		}
		if mountErr != nil {
			errc <- fmt.Errorf("pin netns at %s: %w", path, mountErr)
			return
		}
		errc <- nil
	}()
	return <-errc
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

// loopbackUp sets the loopback interface of the namespace at path up.
func loopbackUp(path string) error {
	return InNetNS(path, func() error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return fmt.Errorf("find loopback: %w", err)
		}
		if err := netlink.LinkSetUp(lo); err != nil {
			return fmt.Errorf("set loopback up: %w", err)
		}
		return nil
	})
}

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
