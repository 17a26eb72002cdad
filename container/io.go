package container

import (
	"context"
	"io"
	"sync"
	"sync/atomic"

	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/log"
)

// containerIO connects a container's stdio FIFOs to its CRI log and to attached
// clients. It owns two copy goroutines (stdout, stderr) that end when the container's
// side of the FIFOs closes; done is closed when both have ended.
type containerIO struct {
	dio  *cio.DirectIO
	log  *logFile
	done chan struct{}

	stdout, stderr *broadcaster
	stdinMu        sync.Mutex
	stdin          io.WriteCloser // nil when the container has no stdin
}

// creator returns a cio.Creator that makes FIFOs in dir and starts copying.
func newIOCreator(ctx context.Context, dir string, c *Container, logf *logFile, ioOut **containerIO) cio.Creator {
	return func(id string) (cio.IO, error) {
		fifos, err := cio.NewFIFOSetInDir(dir, id, c.Config.GetTty())
		if err != nil {
			return nil, err
		}
		if !c.Config.GetStdin() {
			fifos.Stdin = ""
		}
		cio, err := attachIO(ctx, fifos, logf)
		if err != nil {
			return nil, err
		}
		*ioOut = cio
		return cio.dio, nil
	}
}

// attachIO opens existing (or new) FIFOs and starts copying; used at start and when
// shimd reattaches to a running container after a restart.
func attachIO(ctx context.Context, fifos *cio.FIFOSet, logf *logFile) (*containerIO, error) {
	// The FIFOs open in the background until the shim opens its ends; a context that
	// ends (the request's) would close them if that open is still pending then, and the
	// container's output would be lost. Close ends them instead.
	dio, err := cio.NewDirectIO(context.WithoutCancel(ctx), fifos)
	if err != nil {
		return nil, err
	}
	cio := &containerIO{dio: dio, log: logf, done: make(chan struct{}), stdout: &broadcaster{}, stderr: &broadcaster{}}
	if fifos.Stdin != "" {
		cio.stdin = dio.Stdin
	}
	// The copy that ends last closes the log and done (no goroutine waits for both:
	// a node's idle containers would each keep one).
	var copying atomic.Int32
	copying.Store(2)
	copyStream := func(r io.ReadCloser, stream string, b *broadcaster) {
		defer func() {
			if copying.Add(-1) == 0 {
				if logf != nil {
					logf.Close()
				}
				close(cio.done)
			}
		}()
		if r == nil {
			return
		}
		if err := copyLogStream(r, stream, logf, b); err != nil {
			log.G(ctx).WithError(err).Debugf("copy %s", stream)
		}
		b.closeAll()
	}
	go copyStream(dio.Stdout, "stdout", cio.stdout)
	go copyStream(dio.Stderr, "stderr", cio.stderr)
	return cio, nil
}

// close releases the FIFOs after the copies ended (or gives up on them).
func (c *containerIO) close() {
	c.dio.Cancel()
	c.dio.Close()
}

// detach ends the copies (done is closed when they have ended) without touching the
// FIFOs, as the exit of shimd would: the container's side keeps them open, and a
// later attachIO reads on.
func (c *containerIO) detach() {
	for _, f := range []io.Closer{c.dio.Stdin, c.dio.Stdout, c.dio.Stderr} {
		if f != nil {
			f.Close()
		}
	}
}

// broadcaster hands output to every attached client. Each client has a queue and a
// goroutine of its own that writes it out; a client whose queue is full (it does not
// read) or whose write fails is dropped. So the container's output, and its log, never
// wait for a client.
type broadcaster struct {
	mu      sync.Mutex
	writers map[*attachedWriter]struct{}
	closed  bool
}

// attachQueue is how many chunks of output an attached client may fall behind.
const attachQueue = 256

type attachedWriter struct {
	w     io.WriteCloser
	queue chan []byte   // closed by detach; the writer goroutine then ends
	done  chan struct{} // closed when the writer goroutine has ended
}

// run writes the queue out until it is closed; after a failed write it drains it.
func (aw *attachedWriter) run() {
	defer close(aw.done)
	failed := false
	for p := range aw.queue {
		if !failed {
			if _, err := aw.w.Write(p); err != nil {
				failed = true
			}
		}
	}
}

// Write queues a copy of p for every attached writer.
func (b *broadcaster) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.writers) == 0 {
		return len(p), nil
	}
	chunk := append([]byte(nil), p...)
	for aw := range b.writers {
		select {
		case aw.queue <- chunk:
		default: // the client is too slow: drop it rather than hold the container
			b.detachLocked(aw)
		}
	}
	return len(p), nil
}

// add attaches w; the returned channel is closed when w is detached (stream ended,
// client too slow or remove called) and everything queued for it was written.
func (b *broadcaster) add(w io.WriteCloser) (remove func(), done <-chan struct{}) {
	aw := &attachedWriter{w: w, queue: make(chan []byte, attachQueue), done: make(chan struct{})}
	go aw.run() // ends when the queue is closed by detachLocked
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		close(aw.queue)
		return func() {}, aw.done
	}
	if b.writers == nil {
		b.writers = map[*attachedWriter]struct{}{}
	}
	b.writers[aw] = struct{}{}
	return func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.detachLocked(aw)
	}, aw.done
}

func (b *broadcaster) detachLocked(aw *attachedWriter) {
	if _, ok := b.writers[aw]; ok {
		delete(b.writers, aw)
		close(aw.queue)
	}
}

func (b *broadcaster) closeAll() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	for aw := range b.writers {
		b.detachLocked(aw)
	}
}
