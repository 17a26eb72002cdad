package container

import (
	"context"
	"io"

	"github.com/containerd/log"

	"github.com/shimd/shimd/ctrd"
	"github.com/shimd/shimd/streaming"
)

// Exec runs cmd in the container with the client's streams and waits for it. The
// client leaving ends ctx, which kills the process. A non-zero exit code reaches the
// client as a streaming.ExitError.
func (b *Streams) Exec(ctx context.Context, id string, cmd []string, in io.Reader, out, errw io.WriteCloser, tty bool, resize <-chan streaming.TerminalSize) error {
	c, err := b.s.containers.running(id)
	if err != nil {
		return err
	}
	ctx = log.WithLogger(ctx, log.G(ctx).WithField("container", c.ID))
	// The shim wants both output FIFOs: a stream the client did not ask for is discarded.
	r := execRequest{cmd: cmd, tty: tty, resize: terminalSizes(ctx, resize), stdout: io.Discard, stderr: io.Discard}
	if in != nil {
		r.stdin = in
	}
	if out != nil {
		r.stdout = out
	}
	if errw != nil {
		r.stderr = errw
	}
	code, err := b.s.exec(ctx, c, r)
	if err != nil {
		return err
	}
	if code != 0 {
		return streaming.ExitError{Code: int(code)}
	}
	return nil
}

// terminalSizes converts the client's resize events until ctx ends or they stop.
func terminalSizes(ctx context.Context, in <-chan streaming.TerminalSize) <-chan [2]uint16 {
	if in == nil {
		return nil
	}
	out := make(chan [2]uint16)
	go func() {
		defer close(out)
		for {
			select {
			case <-ctx.Done():
				return
			case sz, ok := <-in:
				if !ok {
					return
				}
				if sz.Width == 0 || sz.Height == 0 {
					continue
				}
				select {
				case out <- [2]uint16{sz.Width, sz.Height}:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out
}

// resizeTask resizes the container's TTY as the client asks until ctx ends.
func (b *Streams) resizeTask(ctx context.Context, id string, resize <-chan streaming.TerminalSize) {
	sizes := terminalSizes(ctx, resize) // ends with ctx
	_, task, err := ctrd.LoadTask(ctx, b.s.opts.Client, id)
	if err != nil {
		return
	}
	for sz := range sizes {
		if err := task.Resize(ctx, uint32(sz[0]), uint32(sz[1])); err != nil {
			log.G(ctx).WithError(err).WithField("container", id).Debug("resize tty")
		}
	}
}
