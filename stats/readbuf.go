package stats

import (
	"errors"
	"sync"

	"golang.org/x/sys/unix"
)

// Reading cgroup files without garbage. A stats list reads some ten small files per
// container and per pod; read with os.ReadFile and parsed through strings, maps and
// a bufio.Scanner, each pod left about 50 KiB of garbage per list, so a list of 250
// pods set off a collection while other calls were being served (measured on 16
// cores: a status call's p99 was the wait for that collection to start). Here a file
// is read with bare system calls into a pooled buffer and parsed in place.

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
		return nil, &pathError{path, err}
	}
	defer unix.Close(fd)
	n := 0
	for {
		if n == len(buf) {
			return nil, &pathError{path, errFileTooLarge}
		}
		m, err := unix.Read(fd, buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &pathError{path, err}
		}
		if m == 0 {
			return buf[:n], nil
		}
		n += m
	}
}

// pathError is an error of a file's read, as os.PathError says it.
type pathError struct {
	path string
	err  error
}

func (e *pathError) Error() string { return "read " + e.path + ": " + e.err.Error() }
func (e *pathError) Unwrap() error { return e.err }

// parseUint parses a decimal number without allocating; ok is false for anything
// else, an empty input or an overflow.
func parseUint(b []byte) (uint64, bool) {
	if len(b) == 0 {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if v > (1<<64-1-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	return v, true
}

// trimSpace is bytes.TrimSpace for the ASCII space, tab and newline of kernel files.
func trimSpace(b []byte) []byte {
	for len(b) > 0 && isSpace(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && isSpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// nextLine cuts the first line off data.
func nextLine(data []byte) (line, rest []byte) {
	for i, c := range data {
		if c == '\n' {
			return data[:i], data[i+1:]
		}
	}
	return data, nil
}

// nextField cuts the first space-separated field off line.
func nextField(line []byte) (field, rest []byte) {
	for len(line) > 0 && isSpace(line[0]) {
		line = line[1:]
	}
	for i, c := range line {
		if isSpace(c) {
			return line[:i], line[i:]
		}
	}
	return line, nil
}
