package container

import (
	"io"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// maxSeccompProfileSize caps a Localhost seccomp profile; containerd's and CRI-O's
// profiles are a few tens of KiB.
const maxSeccompProfileSize = 1 << 20

// readSeccompProfile reads a Localhost seccomp profile from the node. The file must be
// a regular file of at most maxSeccompProfileSize bytes: it is opened non-blocking, so
// a FIFO cannot hold the request in open(), and checked with fstat before any read, so
// /dev/zero or a directory is refused instead of read until memory runs out.
func readSeccompProfile(field, path string) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, invalid(field, "open profile %q: %v", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, invalid(field, "stat profile %q: %v", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, invalid(field, "profile %q is not a regular file", path)
	}
	if st.Size > maxSeccompProfileSize {
		return nil, invalid(field, "profile %q is %d bytes, more than the limit of %d", path, st.Size, maxSeccompProfileSize)
	}
	// The file may grow after fstat: read one byte past the limit to notice.
	data, err := io.ReadAll(io.LimitReader(f, maxSeccompProfileSize+1))
	if err != nil {
		return nil, invalid(field, "read profile %q: %v", path, err)
	}
	if len(data) > maxSeccompProfileSize {
		return nil, invalid(field, "profile %q is larger than the limit of %d bytes", path, maxSeccompProfileSize)
	}
	return data, nil
}

// appArmorProfiles lists the profiles the kernel has loaded, one "name (mode)" a line.
const appArmorProfiles = "/sys/kernel/security/apparmor/profiles"

// appArmorProfileLoaded tells whether the list at path names the profile.
func appArmorProfileLoaded(path, name string) bool {
	data, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, name+" (") {
			return true
		}
	}
	return false
}
