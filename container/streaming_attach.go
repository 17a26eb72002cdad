package container

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"

	"github.com/shimd/shimd/ctrd"
	"github.com/shimd/shimd/streaming"
)

// Attach connects the client to the container's stdio: output through the IO
// broadcasters, input into the container's stdin. It returns when the client leaves,
// the container's output ends or, without stdin_once, the client's input ends. The
// container keeps running. With stdin_once, the first attacher with stdin that
// detaches (or whose input ends) closes the container's stdin.
func (b *Streams) Attach(ctx context.Context, id string, in io.Reader, out, errw io.WriteCloser, tty bool, resize <-chan streaming.TerminalSize) error {
	c, err := b.s.containers.running(id)
	if err != nil {
		return err
	}
	cio := c.IO()
	if cio == nil {
		return fmt.Errorf("container %s has no IO to attach to: %w", c.ID, errdefs.ErrFailedPrecondition)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if tty && resize != nil {
		go b.resizeTask(ctx, c.ID, resize)
	}
	var outDone, errDone <-chan struct{}
	if out != nil {
		remove, done := cio.stdout.add(out)
		defer remove()
		outDone = done
	}
	if errw != nil && !tty {
		remove, done := cio.stderr.add(errw)
		defer remove()
		errDone = done
	}
	ioDone := cio.done
	if outDone != nil || errDone != nil {
		ioDone = nil // the outputs' ends say it
	}
	cio.stdinMu.Lock()
	hasStdin := in != nil && cio.stdin != nil
	cio.stdinMu.Unlock()
	var stdinDone chan error
	if hasStdin {
		stdinDone = make(chan error, 1)
		// Ends when the client's input ends, which the streaming server causes by
		// closing the session once Attach returns.
		go func() { stdinDone <- copyStdin(cio, in) }()
		if c.Config.GetStdinOnce() {
			defer b.closeStdin(ctx, c, cio)
		}
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-outDone:
			return nil
		case <-errDone:
			return nil
		case <-ioDone:
			return nil
		case <-stdinDone:
			if !c.Config.GetStdinOnce() {
				return nil // detach, as when the client leaves
			}
			b.closeStdin(ctx, c, cio) // the container sees EOF; its output still comes
			stdinDone = nil
			if outDone == nil && errDone == nil {
				return nil
			}
		}
	}
}

// copyStdin copies the client's input into the container's stdin until either ends.
func copyStdin(cio *containerIO, in io.Reader) error {
	buf := make([]byte, 32<<10)
	for {
		n, err := in.Read(buf)
		if n > 0 {
			cio.stdinMu.Lock()
			werr := io.ErrClosedPipe
			if cio.stdin != nil {
				_, werr = cio.stdin.Write(buf[:n])
			}
			cio.stdinMu.Unlock()
			if werr != nil {
				return werr
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// closeStdin closes the container's stdin for good: our end of the FIFO and, through
// the shim, the process's end. Idempotent.
func (b *Streams) closeStdin(ctx context.Context, c *Container, cio *containerIO) {
	cio.stdinMu.Lock()
	w := cio.stdin
	cio.stdin = nil
	cio.stdinMu.Unlock()
	if w == nil {
		return
	}
	_ = w.Close()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_, task, err := ctrd.LoadTask(ctx, b.s.opts.Client, c.ID)
	if err == nil {
		err = task.CloseIO(ctx, client.WithStdinCloser)
	}
	if err != nil && !errdefs.IsNotFound(err) {
		log.G(ctx).WithError(err).WithField("container", c.ID).Debug("close stdin")
	}
}
