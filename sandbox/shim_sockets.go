package sandbox

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// A shim's sockets: the name containerd gives its task API socket, and the path of
// the one a shim process listens on, read from /proc.

// shimSocketName is the file name of a shim's task API socket: containerd's pkg/shim
// (CreateSocketAddress) names it sha256(<address>/<namespace>/<grouping id>), in a
// socket directory of containerd's configuration (/run/containerd/s by default). Its
// debug socket, in the same directory, is named after ".../debug".
func shimSocketName(address, ns, id string) string {
	return fmt.Sprintf("%x", sha256.Sum256([]byte(filepath.Join(address, ns, id))))
}

// listeningSocket finds the path of the unix socket named name that process pid
// listens on: the socket inodes among its descriptors, looked up in /proc/net/unix.
// This finds the socket directory, which shimd does not know.
func listeningSocket(pid int, name string) (string, error) {
	table, inodes, err := socketTable(pid)
	if err != nil {
		return "", err
	}
	return socketPathOf(table, inodes, name)
}

// socketTable reads process pid's /proc/net/unix and the socket inodes among its
// descriptors.
func socketTable(pid int) (string, map[string]bool, error) {
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return "", nil, err
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		link, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if ino, ok := strings.CutPrefix(link, "socket:["); ok {
			inodes[strings.TrimSuffix(ino, "]")] = true
		}
	}
	table, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/unix", pid))
	if err != nil {
		return "", nil, err
	}
	return string(table), inodes, nil
}

// socketPathOf picks, from a /proc/net/unix table, the path of the listening socket
// (flag __SO_ACCEPTCON) named name among inodes.
func socketPathOf(table string, inodes map[string]bool, name string) (string, error) {
	const acceptCon = 0x10000
	for _, line := range strings.Split(table, "\n")[1:] {
		// Num RefCount Protocol Flags Type St Inode Path
		f := strings.Fields(line)
		if len(f) < 8 || !inodes[f[6]] {
			continue
		}
		if flags, err := strconv.ParseUint(f[3], 16, 32); err == nil && flags&acceptCon != 0 && filepath.Base(f[7]) == name {
			return f[7], nil
		}
	}
	return "", errors.New("the shim listens on no unix socket")
}
