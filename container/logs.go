package container

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// CRI log format, as the kubelet reads it:
//
//	<RFC3339Nano timestamp> <stdout|stderr> <P|F> <message>\n
//
// A line longer than maxLogLine is split into partial (P) lines and a final (F) one;
// output that ends without a newline ends with a partial line.
const maxLogLine = 16 * 1024

// logFile is a container's CRI log. Both streams write to it; ReopenContainerLog
// replaces the file after the kubelet rotated it.
type logFile struct {
	mu   sync.Mutex
	path string
	f    *os.File
	w    *bufio.Writer
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
	l.f, l.w = f, bufio.NewWriterSize(f, 32*1024)
	return nil
}

// writeLine writes one CRI log line and flushes it, so the kubelet sees it at once.
func (l *logFile) writeLine(stream string, partial bool, msg []byte) {
	tag := "F"
	if partial {
		tag = "P"
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.w == nil {
		return
	}
	l.w.WriteString(l.now().UTC().Format(time.RFC3339Nano))
	l.w.WriteByte(' ')
	l.w.WriteString(stream)
	l.w.WriteByte(' ')
	l.w.WriteString(tag)
	l.w.WriteByte(' ')
	l.w.Write(msg)
	l.w.WriteByte('\n')
	l.w.Flush()
}

// reopen closes the file and opens the path again (after a rotation).
func (l *logFile) reopen() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f != nil {
		l.w.Flush()
		l.f.Close()
	}
	l.f, l.w = nil, nil
	return l.open()
}

func (l *logFile) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	l.w.Flush()
	err := l.f.Close()
	l.f, l.w = nil, nil
	return err
}

// copyLogStream reads one output stream of a container until EOF, writing CRI log
// lines to log (if not nil) and the raw bytes to raw (attached clients; may be nil).
func copyLogStream(r io.Reader, stream string, log *logFile, raw io.Writer) error {
	if raw != nil {
		// Attached clients get bytes as they come (a prompt, "echo -n"), not lines.
		r = io.TeeReader(r, raw)
	}
	br := bufio.NewReaderSize(r, maxLogLine)
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			if log != nil {
				full := line[len(line)-1] == '\n'
				msg := bytes.TrimSuffix(line, []byte{'\n'})
				// A full buffer is a partial line, and so is output that ends without a
				// newline (as containerd's CRI writes it): the kubelet adds a newline to
				// an F line, so "echo -n DONE" must stay "DONE" in kubectl logs and in a
				// termination message read from the log.
				log.writeLine(stream, !full, msg)
			}
		}
		switch {
		case err == nil, errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF), errors.Is(err, os.ErrClosed):
			return nil
		default:
			return err
		}
	}
}
