package stats

import (
	"errors"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// Reading cgroup files without garbage. A stats list reads some ten small files per
// container and per pod; read with os.ReadFile and parsed through strings, maps and
// a bufio.Scanner, each pod left about 50 KiB of garbage per list, so a list of 250
// pods set off a collection while other calls were being served (measured on 16
// cores: a status call's p99 was the wait for that collection to start). Here a file
// is read with bare system calls into a pooled buffer and parsed in place (bytes.Cut,
// and strconv on a string(b) conversion, which does not escape, allocate nothing).

// fileBufSize holds any cgroup file shimd reads (memory.stat is about 1.5 KiB).
const fileBufSize = 8 << 10

var fileBufs = sync.Pool{New: func() any { b := make([]byte, fileBufSize); return &b }}

// errFileTooLarge is a file that does not fit in a buffer (none of the cgroup
// files read here comes close).
var errFileTooLarge = errors.New("file larger than the read buffer")

// readInto reads the whole file at path into buf and returns the bytes read.
func readInto(path string, buf []byte) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	n := 0
	for {
		if n == len(buf) {
			return nil, &os.PathError{Op: "read", Path: path, Err: errFileTooLarge}
		}
		m, err := unix.Read(fd, buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "read", Path: path, Err: err}
		}
		if m == 0 {
			return buf[:n], nil
		}
		n += m
	}
}
