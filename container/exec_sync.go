package container

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/ctrd"
)

// maxExecSyncOutput caps each of stdout and stderr of ExecSync; the rest is dropped.
const maxExecSyncOutput = 16 << 20

// ExecSync runs a command in a running container with the container's user, env and
// working directory, and returns its output and exit code. A timeout kills the
// command and answers DeadlineExceeded.
func (s *Manager) ExecSync(ctx context.Context, req *runtimeapi.ExecSyncRequest) (*runtimeapi.ExecSyncResponse, error) {
	if len(req.GetCmd()) == 0 {
		return nil, invalid("cmd", "is required")
	}
	c, err := s.containers.running(req.GetContainerId())
	if err != nil {
		return nil, err
	}
	if t := req.GetTimeout(); t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(t)*time.Second)
		defer cancel()
	}
	stdout, stderr := &cappedBuffer{max: maxExecSyncOutput}, &cappedBuffer{max: maxExecSyncOutput}
	code, err := s.exec(ctx, c, execRequest{cmd: req.GetCmd(), stdout: stdout, stderr: stderr})
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ExecSyncResponse{Stdout: stdout.buf.Bytes(), Stderr: stderr.buf.Bytes(), ExitCode: int32(code)}, nil
}

type execRequest struct {
	cmd            []string
	tty            bool
	stdin          interface{ Read([]byte) (int, error) }
	stdout, stderr interface{ Write([]byte) (int, error) }
	resize         <-chan [2]uint16 // width, height
}

// exec runs one process in the container and waits for it. When ctx ends the process
// is killed and ctx's error returned. Output that a leftover child keeps open is
// given ioDrainTimeout after the process exits, then cut.
func (s *Manager) exec(ctx context.Context, c *Container, r execRequest) (uint32, error) {
	task, pspec, err := execProcess(ctx, s.opts.Client, c, r)
	if err != nil {
		return 0, err
	}
	// The shim holds the process's stdin open until CloseIO: the end of the caller's
	// stdin is passed on once the process has started (forwardInput).
	var stdin interface{ Read([]byte) (int, error) }
	var stdinEOF chan struct{}
	if r.stdin != nil {
		stdinEOF = make(chan struct{})
		stdin = &eofReader{r: r.stdin, eof: stdinEOF}
	}
	opts := []cio.Opt{cio.WithStreams(stdin, r.stdout, r.stderr), cio.WithFIFODir(s.dirs.fifoDir(c.ID))}
	if r.tty {
		opts = append(opts, cio.WithTerminal)
	}
	execID := "exec-" + newContainerID()[:32]
	oomsBefore := c.oomCount()
	// The process outlives a cancelled request only until it is killed below.
	dctx := context.WithoutCancel(ctx)
	proc, err := task.Exec(dctx, execID, pspec, cio.NewCreator(opts...))
	if err != nil {
		return 0, execError(dctx, task, c, oomsBefore, err)
	}
	defer deleteExecLater(dctx, proc)
	exitc, err := proc.Wait(dctx)
	if err != nil {
		return 0, execError(dctx, task, c, oomsBefore, err)
	}
	if err := proc.Start(dctx); err != nil {
		if code, ok := execStartExitCode(err); ok {
			// As a shell answers a command it cannot run; the kubelet's exec probes
			// then fail with this message instead of an error of unknown kind.
			if r.stderr != nil {
				fmt.Fprintf(r.stderr, "%s\n", execStartMessage(err))
			}
			return code, nil
		}
		return 0, execError(dctx, task, c, oomsBefore, err)
	}
	execDone := make(chan struct{})
	defer close(execDone)
	forwardInput(dctx, proc, r.resize, stdinEOF, execDone)
	select {
	case st := <-exitc:
		log.G(ctx).WithField("exec", execID).Debugf("exec exited with %d", st.ExitCode())
		drainIO(proc.IO())
		log.G(ctx).WithField("exec", execID).Debug("exec output drained")
		return st.ExitCode(), nil
	case <-ctx.Done():
		_ = proc.Kill(dctx, syscall.SIGKILL)
		<-exitc
		drainIO(proc.IO())
		return 0, fmt.Errorf("exec %v in container %s: %w", r.cmd, c.ID, ctx.Err())
	}
}

// execProcess loads the container's task and makes the process spec of r: the
// container's own process (user, env, working directory) with r's command.
func execProcess(ctx context.Context, cl *client.Client, c *Container, r execRequest) (client.Task, *specs.Process, error) {
	cc, task, err := ctrd.LoadTask(ctx, cl, c.ID)
	if cc != nil && errdefs.IsNotFound(err) {
		return nil, nil, fmt.Errorf("container %s has no task: %v: %w", c.ID, err, errdefs.ErrFailedPrecondition)
	}
	if err != nil {
		return nil, nil, err
	}
	spec, err := cc.Spec(ctx)
	if err != nil {
		return nil, nil, err
	}
	pspec := *spec.Process
	pspec.Args = r.cmd
	pspec.Terminal = r.tty
	pspec.ConsoleSize = nil
	return task, &pspec, nil
}

// deleteExecLater deletes an exec process in the background (bounded): the delete
// waits in the shim for the process's IO, which a leftover child may hold for
// seconds, and the caller does not wait for that.
func deleteExecLater(ctx context.Context, proc client.Process) {
	go func() {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if _, err := proc.Delete(cctx, client.WithProcessKill); err != nil && !errdefs.IsNotFound(err) {
			log.G(cctx).WithError(err).WithField("exec", proc.ID()).Debug("delete exec process")
		}
	}()
}

// forwardInput passes a started exec process the end of its stdin (when stdinEOF
// closes, nil for none) and the terminal's resizes, until done closes.
func forwardInput(ctx context.Context, proc client.Process, resize <-chan [2]uint16, stdinEOF, done <-chan struct{}) {
	if stdinEOF != nil {
		go func() {
			select {
			case <-stdinEOF:
				if err := proc.CloseIO(ctx, client.WithStdinCloser); err != nil && !errdefs.IsNotFound(err) {
					log.G(ctx).WithError(err).WithField("exec", proc.ID()).Debug("close exec stdin")
				}
			case <-done:
			}
		}()
	}
	if resize != nil {
		go func() {
			for size := range resize {
				_ = proc.Resize(ctx, uint32(size[0]), uint32(size[1]))
			}
		}()
	}
}

// eofReader closes eof when its reader ends (EOF or error).
type eofReader struct {
	r    interface{ Read([]byte) (int, error) }
	eof  chan struct{}
	once sync.Once
}

func (e *eofReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil {
		e.once.Do(func() { close(e.eof) })
	}
	return n, err
}

// drainIO waits briefly for an exited process's output, then closes it: a background
// child holding the pipes must not hold the caller.
func drainIO(pio cio.IO) {
	done := make(chan struct{})
	go func() { pio.Wait(); close(done) }()
	select {
	case <-done:
		pio.Close()
	case <-time.After(ioDrainTimeout):
		// Closing our ends of the pipes ends the copies.
		pio.Cancel()
		pio.Close()
		<-done
	}
}

// cappedBuffer keeps the first max bytes written and discards the rest. (The buffer
// is a field, not embedded: io.Copy would use bytes.Buffer's ReadFrom and skip the cap.)
type cappedBuffer struct {
	buf bytes.Buffer
	max int
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.buf.Len(); room > 0 {
		if len(p) > room {
			b.buf.Write(p[:room])
		} else {
			b.buf.Write(p)
		}
	}
	return len(p), nil
}
