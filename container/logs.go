package container

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/fifo"
	"golang.org/x/sys/unix"
)

// CRI log format, as the kubelet reads it:
//
//	<RFC3339Nano timestamp> <stdout|stderr> <P|F> <message>\n
//
// A line longer than maxLogLine is split into partial (P) lines and a final (F) one;
// output that ends without a newline ends with a partial line.
const maxLogLine = 16 * 1024

// logFile is a container's CRI log. Both streams write to it; ReopenContainerLog
// replaces the file after the kubelet rotated it. It holds no buffer of its own: each
// line is put together in a pooled one and written with one write (a node of 250
// containers kept 8 MiB in per-container write buffers that only ever held one line).
type logFile struct {
	mu   sync.Mutex
	path string
	f    *os.File
	now  func() time.Time
}

func openLog(path string) (*logFile, error) {
	l := &logFile{path: path, now: time.Now}
	if err := l.open(); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *logFile) open() error {
	if err := os.MkdirAll(filepath.Dir(l.path), 0o755); err != nil {
		return fmt.Errorf("create log dir: %w", err)
	}
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		return fmt.Errorf("open container log: %w", err)
	}
	l.f = f
	return nil
}

// logBufs are the buffers that output is read into and log lines are put together
// in: a timestamp, the stream, the tag and a message of at most maxLogLine bytes.
var logBufs = sync.Pool{New: func() any {
	b := make([]byte, 0, maxLogLine+64)
	return &b
}}

// writeLine writes one CRI log line with one write, so the kubelet sees it at once.
func (l *logFile) writeLine(stream string, partial bool, msg []byte) {
	tag := " F "
	if partial {
		tag = " P "
	}
	bp := logBufs.Get().(*[]byte)
	b := l.now().UTC().AppendFormat((*bp)[:0], time.RFC3339Nano)
	b = append(b, ' ')
	b = append(b, stream...)
	b = append(b, tag...)
	b = append(b, msg...)
	b = append(b, '\n')
	l.mu.Lock()
	if l.f != nil {
		_, _ = l.f.Write(b)
	}
	l.mu.Unlock()
	if cap(b) <= maxLogLine+64 {
		*bp = b
		logBufs.Put(bp)
	}
}

// reopen closes the file and opens the path again (after a rotation).
func (l *logFile) reopen() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f != nil {
		l.f.Close()
	}
	l.f = nil
	return l.open()
}

func (l *logFile) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

// copyLogStream reads one output stream of a container until EOF, writing CRI log
// lines to log (if not nil) and the raw bytes to raw (attached clients; may be nil).
//
// A stream that waits for output holds no buffer: a FIFO (anything with a raw
// descriptor in Go's poller) is read only once it is readable, into a pooled buffer
// that goes back to the pool before the next wait; only a line that has not ended
// yet is kept between reads. With a 16 KiB buffer per stream, the readers of a node's
// idle containers held 9.9 MiB at 250 pods, shimd's largest heap item.
func copyLogStream(r io.Reader, stream string, log *logFile, raw io.Writer) error {
	lw := &lineWriter{}
	if log != nil {
		lw.emit = func(partial bool, msg []byte) { log.writeLine(stream, partial, msg) }
	}
	handle := func(p []byte) {
		if raw != nil {
			// Attached clients get bytes as they come (a prompt, "echo -n"), not lines.
			_, _ = raw.Write(p)
		}
		lw.write(p)
	}
	var err error
	if sc, ok := r.(syscall.Conn); ok {
		err = readRaw(sc, handle)
	} else {
		err = readPooled(r, handle)
	}
	lw.flush()
	if err == nil || errors.Is(err, io.EOF) || closedErr(err) {
		return nil
	}
	return err
}

// readPooled reads r until it fails, handing each read's bytes to handle.
func readPooled(r io.Reader, handle func([]byte)) error {
	bp := logBufs.Get().(*[]byte)
	defer logBufs.Put(bp)
	buf := (*bp)[:maxLogLine]
	for {
		n, err := r.Read(buf)
		if n > 0 {
			handle(buf[:n])
		}
		if err != nil {
			return err
		}
	}
}

// readRaw is readPooled for a descriptor in Go's poller: it takes a buffer only when
// the descriptor is readable. A descriptor that is not non-blocking (a Read on it
// would block) is read as readPooled would, through the callback.
func readRaw(sc syscall.Conn, handle func([]byte)) error {
	rc, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	for {
		var (
			bp   *[]byte
			n    int
			rerr error
		)
		err := rc.Read(func(fd uintptr) bool {
			bp = logBufs.Get().(*[]byte)
			for {
				n, rerr = unix.Read(int(fd), (*bp)[:maxLogLine])
				if rerr != unix.EINTR {
					break
				}
			}
			if rerr == unix.EAGAIN {
				logBufs.Put(bp)
				bp = nil
				return false // wait until readable
			}
			return true
		})
		if err == nil && rerr == nil && n > 0 {
			handle((*bp)[:n])
		}
		if bp != nil {
			logBufs.Put(bp)
		}
		switch {
		case err != nil:
			return err
		case rerr != nil:
			return rerr
		case n == 0:
			return io.EOF
		}
	}
}

// closedErr says whether err is the end of a read on a file that was closed under it
// (detach): os.ErrClosed from a Read, the FIFO's ErrReadClosed, and the poller's
// "use of closed file" from a raw read, which Go does not export as a value.
func closedErr(err error) bool {
	return errors.Is(err, os.ErrClosed) || errors.Is(err, fifo.ErrReadClosed) || err.Error() == "use of closed file"
}

// lineWriter cuts output into CRI log lines, as bufio.Reader.ReadSlice('\n') with a
// maxLogLine buffer would: a line up to its newline (F), or maxLogLine bytes of a
// longer one (P); output that ends without a newline ends with a partial line.
type lineWriter struct {
	emit    func(partial bool, msg []byte) // nil: no log, the output is dropped
	pending []byte                         // the start of a line whose end has not come yet
}

func (w *lineWriter) write(p []byte) {
	if w.emit == nil {
		return
	}
	if len(w.pending) == 0 {
		if rest := w.cut(p, 0); len(rest) > 0 {
			w.pending = append([]byte(nil), rest...)
		}
		return
	}
	// The pending bytes hold no newline: only the new ones are searched, so a line
	// that comes a byte at a time costs no more than one that comes at once.
	held := len(w.pending)
	w.pending = append(w.pending, p...)
	switch rest := w.cut(w.pending, held); {
	case len(rest) == len(w.pending): // nothing was cut
	case len(rest) == 0 && cap(w.pending) > 4096:
		w.pending = nil // a long line passed: give its memory back
	default:
		w.pending = append(w.pending[:0], rest...)
	}
}

// cut writes the lines that p completes and returns what is left of it; its first
// clean bytes are known to hold no newline.
func (w *lineWriter) cut(p []byte, clean int) []byte {
	for len(p) > 0 {
		window := p[:min(len(p), maxLogLine)]
		if i := bytes.IndexByte(window[min(clean, len(window)):], '\n'); i >= 0 {
			i += min(clean, len(window))
			w.emit(false, p[:i])
			p = p[i+1:]
			clean = 0
			continue
		}
		if len(window) < maxLogLine {
			return p
		}
		w.emit(true, window) // a full buffer is a partial line
		p = p[maxLogLine:]
		clean = 0
	}
	return nil
}

// flush writes what is left at the end of the output as a partial line: the kubelet
// adds a newline to an F line, so "echo -n DONE" must stay "DONE" in kubectl logs and
// in a termination message read from the log (as containerd's CRI writes it).
func (w *lineWriter) flush() {
	if len(w.pending) > 0 {
		w.emit(true, w.pending)
		w.pending = nil
	}
}
