package container

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/fifo"

	"github.com/stretchr/testify/require"
)

func TestCopyLogStream(t *testing.T) {
	long := strings.Repeat("x", maxLogLine+10)
	tests := []struct {
		name  string
		input string
		want  []string
	}{
		{"lines", "hello\nworld\n", []string{"stdout F hello", "stdout F world"}},
		{"empty line", "\n", []string{"stdout F "}},
		{"no trailing newline", "a\nb", []string{"stdout F a", "stdout P b"}},
		{"echo -n", "DONE", []string{"stdout P DONE"}},
		{"long line is split", long + "\n", []string{"stdout P " + long[:maxLogLine], "stdout F " + long[maxLogLine:]}},
		{"exactly max", strings.Repeat("y", maxLogLine) + "\n", []string{"stdout P " + strings.Repeat("y", maxLogLine), "stdout F "}},
	}
	// Each case read at once from a reader, and from a pipe (a descriptor in Go's
	// poller, read only when readable) written in pieces of 1, 7 and 1000 bytes, so
	// that lines end in later reads than they began.
	readers := map[string]func(t *testing.T, input string) io.Reader{
		"reader": func(_ *testing.T, input string) io.Reader { return strings.NewReader(input) },
	}
	for _, piece := range []int{1, 7, 1000} {
		readers[fmt.Sprintf("pipe in pieces of %d", piece)] = func(t *testing.T, input string) io.Reader {
			r, w, err := os.Pipe()
			require.NoError(t, err)
			t.Cleanup(func() { r.Close() })
			go func() {
				defer w.Close()
				for p := []byte(input); len(p) > 0; {
					n := min(piece, len(p))
					if _, err := w.Write(p[:n]); err != nil {
						return
					}
					p = p[n:]
					if n < 1000 && len(p)%97 == 0 {
						time.Sleep(time.Millisecond) // let the reader catch up now and then
					}
				}
			}()
			return r
		}
	}
	for _, tt := range tests {
		for kind, reader := range readers {
			if kind == "pipe in pieces of 1" && len(tt.input) > 100 {
				continue
			}
			t.Run(tt.name+", "+kind, func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "c.log")
				l, err := openLog(path)
				require.NoError(t, err)
				l.now = func() time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC) }
				var raw strings.Builder
				require.NoError(t, copyLogStream(reader(t, tt.input), "stdout", l, &raw))
				require.NoError(t, l.Close())
				require.Equal(t, tt.input, raw.String(), "attached clients see the raw bytes")
				require.Equal(t, tt.want, logLines(t, path))
			})
		}
	}
}

// logLines are the lines of the CRI log at path without their timestamps, which must
// be the test's.
func logLines(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	for i, line := range lines {
		require.True(t, strings.HasPrefix(line, "2026-01-02T03:04:05.000000006Z "), line)
		lines[i] = strings.TrimPrefix(line, "2026-01-02T03:04:05.000000006Z ")
	}
	return lines
}

// A container's FIFO, opened as attachIO opens it, closed under a waiting copy (as
// detach does when shimd exits): the copy ends without an error, and a line that had
// not ended is in the log as a partial one.
func TestCopyLogStreamFIFOClosedUnderIt(t *testing.T) {
	dir := t.TempDir()
	fn := filepath.Join(dir, "stdout")
	r, err := fifo.OpenFifo(context.Background(), fn, syscall.O_RDONLY|syscall.O_CREAT|syscall.O_NONBLOCK, 0o700)
	require.NoError(t, err)
	path := filepath.Join(dir, "c.log")
	l, err := openLog(path)
	require.NoError(t, err)
	l.now = func() time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC) }
	done := make(chan error, 1)
	go func() { done <- copyLogStream(r, "stdout", l, nil) }()

	w, err := os.OpenFile(fn, os.O_WRONLY, 0)
	require.NoError(t, err)
	defer w.Close()
	_, err = w.Write([]byte("a\nb"))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		data, _ := os.ReadFile(path)
		return strings.Contains(string(data), "stdout F a")
	}, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, r.Close())
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the copy did not end when its FIFO was closed")
	}
	require.NoError(t, l.Close())
	require.Equal(t, []string{"stdout F a", "stdout P b"}, logLines(t, path))
}

func TestLogReopen(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "c.log")
	l, err := openLog(path)
	require.NoError(t, err)
	l.writeLine("stdout", false, []byte("before"))
	require.NoError(t, os.Rename(path, path+".1"))
	require.NoError(t, l.reopen())
	l.writeLine("stderr", false, []byte("after"))
	require.NoError(t, l.Close())
	old, _ := os.ReadFile(path + ".1")
	cur, _ := os.ReadFile(path)
	require.Contains(t, string(old), "stdout F before")
	require.Contains(t, string(cur), "stderr F after")
	require.NotContains(t, string(cur), "before")
}

// FuzzLogLines checks the line cutting against bufio.Reader.ReadSlice('\n') with a
// maxLogLine buffer, the reader it replaced, for any output arriving in any pieces.
func FuzzLogLines(f *testing.F) {
	f.Add([]byte("hello\nworld\n"), []byte{3, 1})
	f.Add([]byte("a\nb"), []byte{1})
	f.Add(bytes.Repeat([]byte("x"), 3*maxLogLine+5), []byte{200, 7})
	f.Add(append(bytes.Repeat([]byte("y"), maxLogLine), '\n'), []byte{255})
	f.Fuzz(func(t *testing.T, seed, pieces []byte) {
		// Short fuzz inputs, stretched so that lines reach maxLogLine.
		data := seed
		if len(seed) > 0 && seed[0]%4 == 0 {
			data = bytes.Repeat(seed, maxLogLine/len(seed)+2)
		}
		type line struct {
			partial bool
			msg     string
		}
		var want []line
		br := bufio.NewReaderSize(bytes.NewReader(data), maxLogLine)
		for {
			b, err := br.ReadSlice('\n')
			if len(b) > 0 {
				full := b[len(b)-1] == '\n'
				want = append(want, line{!full, string(bytes.TrimSuffix(b, []byte{'\n'}))})
			}
			if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
				break
			}
		}
		var got []line
		w := &lineWriter{emit: func(partial bool, msg []byte) { got = append(got, line{partial, string(msg)}) }}
		for i, p := 0, data; len(p) > 0; i++ {
			n := len(p)
			if len(pieces) > 0 {
				n = min(len(p), 1+int(pieces[i%len(pieces)])*int(pieces[i%len(pieces)]))
			}
			w.write(p[:n])
			p = p[n:]
		}
		w.flush()
		require.Equal(t, want, got)
	})
}
