package runtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/network"
	"github.com/shimd/shimd/sandbox"
	"github.com/shimd/shimd/streaming"
)

// Exec, Attach and PortForward (flow 3 in STYLE.md): the RPC validates and returns a
// URL from the streaming server, starting nothing. The client connects to that URL and
// the streaming server calls the backend below (StreamingBackend): a containerd exec,
// an attachment to the container's IO, or a connection dialled inside the pod's netns.

// StreamingServer hands out the URLs of streaming sessions (package streaming's Server).
type StreamingServer interface {
	GetExec(ctx context.Context, req *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error)
	GetAttach(ctx context.Context, req *runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error)
	GetPortForward(ctx context.Context, req *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error)
}

// SetStreaming sets the server whose URLs Exec, Attach and PortForward return. Call it
// once, before serving; the server's backend is StreamingBackend.
func (s *Service) SetStreaming(srv StreamingServer) { s.streaming = srv }

func (s *Service) streamingServer() (StreamingServer, error) {
	if s.streaming == nil {
		return nil, fmt.Errorf("streaming server: %w", errdefs.ErrNotImplemented)
	}
	return s.streaming, nil
}

// Exec returns the URL of an exec session in a running container.
func (s *Service) Exec(ctx context.Context, req *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error) {
	if len(req.GetCmd()) == 0 && req.GetContainerId() != "" {
		return nil, invalid("cmd", "is required")
	}
	c, srv, err := s.streamTarget(req.GetContainerId(), req.GetTty(), req.GetStdin(), req.GetStdout(), req.GetStderr())
	if err != nil {
		return nil, err
	}
	r := proto.Clone(req).(*runtimeapi.ExecRequest)
	r.ContainerId = c.ID // a prefix resolves now, not when the client connects
	return srv.GetExec(ctx, r)
}

// Attach returns the URL of an attach session to a running container's stdio.
func (s *Service) Attach(ctx context.Context, req *runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error) {
	c, srv, err := s.streamTarget(req.GetContainerId(), req.GetTty(), req.GetStdin(), req.GetStdout(), req.GetStderr())
	if err != nil {
		return nil, err
	}
	r := proto.Clone(req).(*runtimeapi.AttachRequest)
	r.ContainerId = c.ID
	return srv.GetAttach(ctx, r)
}

// streamTarget applies CRI's rules to an exec or attach request and finds its
// running container.
func (s *Service) streamTarget(id string, tty, stdin, stdout, stderr bool) (*Container, StreamingServer, error) {
	if err := validateID("container_id", id); err != nil {
		return nil, nil, err
	}
	if tty && stderr {
		return nil, nil, invalid("stderr", "tty and stderr cannot both be true")
	}
	if !stdin && !stdout && !stderr {
		return nil, nil, invalid("stdin", "one of stdin, stdout and stderr must be set")
	}
	c, err := s.runningContainer(id)
	if err != nil {
		return nil, nil, err
	}
	srv, err := s.streamingServer()
	return c, srv, err
}

// PortForward returns the URL of a port-forward session into a READY pod.
func (s *Service) PortForward(ctx context.Context, req *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error) {
	if err := validateID("pod_sandbox_id", req.GetPodSandboxId()); err != nil {
		return nil, err
	}
	for i, p := range req.GetPort() {
		if p <= 0 || p > 65535 {
			return nil, invalid(fmt.Sprintf("port[%d]", i), "%d is out of range 1-65535", p)
		}
	}
	sb, err := s.readySandbox(req.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	srv, err := s.streamingServer()
	if err != nil {
		return nil, err
	}
	r := proto.Clone(req).(*runtimeapi.PortForwardRequest)
	r.PodSandboxId = sb.ID
	return srv.GetPortForward(ctx, r)
}

func (s *Service) readySandbox(id string) (*sandbox.Sandbox, error) {
	sb, err := s.opts.Sandboxes.Get(id)
	if err != nil {
		return nil, err
	}
	if sb.State() != sandbox.StateReady {
		return nil, fmt.Errorf("sandbox %s is not ready: %w", sb.ID, errdefs.ErrFailedPrecondition)
	}
	return sb, nil
}

// StreamingBackend is what the streaming server runs sessions with.
func (s *Service) StreamingBackend() streaming.Backend { return streamBackend{s} }

type streamBackend struct{ s *Service }

// Exec runs cmd in the container with the client's streams and waits for it. The
// client leaving ends ctx, which kills the process. A non-zero exit code reaches the
// client as a streaming.ExitError.
func (b streamBackend) Exec(ctx context.Context, id string, cmd []string, in io.Reader, out, errw io.WriteCloser, tty bool, resize <-chan streaming.TerminalSize) error {
	c, err := b.s.runningContainer(id)
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

// Attach connects the client to the container's stdio: output through the IO
// broadcasters, input into the container's stdin. It returns when the client leaves,
// the container's output ends or, without stdin_once, the client's input ends. The
// container keeps running. With stdin_once, the first attacher with stdin that
// detaches (or whose input ends) closes the container's stdin.
func (b streamBackend) Attach(ctx context.Context, id string, in io.Reader, out, errw io.WriteCloser, tty bool, resize <-chan streaming.TerminalSize) error {
	c, err := b.s.runningContainer(id)
	if err != nil {
		return err
	}
	c.mu.Lock()
	cio := c.io
	c.mu.Unlock()
	if cio == nil {
		return fmt.Errorf("container %s has no IO to attach to: %w", c.ID, errdefs.ErrFailedPrecondition)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if tty && resize != nil {
		go b.s.resizeTask(ctx, c.ID, resize)
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
			defer b.s.closeStdin(ctx, c, cio)
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
			b.s.closeStdin(ctx, c, cio) // the container sees EOF; its output still comes
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
func (s *Service) closeStdin(ctx context.Context, c *Container, cio *containerIO) {
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
	cc, err := s.opts.Client.LoadContainer(ctx, c.ID)
	if err == nil {
		var task client.Task
		if task, err = cc.Task(ctx, nil); err == nil {
			err = task.CloseIO(ctx, client.WithStdinCloser)
		}
	}
	if err != nil && !errdefs.IsNotFound(err) {
		log.G(ctx).WithError(err).WithField("container", c.ID).Debug("close stdin")
	}
}

// resizeTask resizes the container's TTY as the client asks until ctx ends.
func (s *Service) resizeTask(ctx context.Context, id string, resize <-chan streaming.TerminalSize) {
	sizes := terminalSizes(ctx, resize) // ends with ctx
	cc, err := s.opts.Client.LoadContainer(ctx, id)
	if err != nil {
		return
	}
	task, err := cc.Task(ctx, nil)
	if err != nil {
		return
	}
	for sz := range sizes {
		if err := task.Resize(ctx, uint32(sz[0]), uint32(sz[1])); err != nil {
			log.G(ctx).WithError(err).WithField("container", id).Debug("resize tty")
		}
	}
}

// portForwardLinger is how long a forwarded connection waits for the pod's side once
// the client has finished sending (half-close), before it is cut.
const portForwardLinger = 10 * time.Second

// PortForward connects the stream to 127.0.0.1:port inside the pod's network
// namespace (the host's for a host-network pod) and copies both ways. A port nobody
// listens on is an error, which the client sees on this stream only.
func (b streamBackend) PortForward(ctx context.Context, id string, port int32, stream io.ReadWriteCloser) error {
	sb, err := b.s.readySandbox(id)
	if err != nil {
		return err
	}
	if port <= 0 || port > 65535 {
		return invalid("port", "%d is out of range 1-65535", port)
	}
	conn, err := dialPod(sb.NetNSPath, port)
	if err != nil {
		return err
	}
	defer conn.Close()
	toPod, toClient := make(chan error, 1), make(chan error, 1)
	go func() {
		_, err := io.Copy(conn, stream)
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.CloseWrite() // the pod sees the client's EOF
		}
		toPod <- err
	}()
	go func() {
		_, err := io.Copy(stream, conn)
		toClient <- err
	}()
	select {
	case err = <-toClient:
	case err = <-toPod:
		select {
		case err = <-toClient:
		case <-time.After(portForwardLinger):
		}
	}
	if err != nil {
		// Not the client's business: it reports errors for the whole session.
		log.G(ctx).WithError(err).WithField("sandbox", sb.ID).Debugf("port forward to %d ended", port)
	}
	return nil
}

// dialPod connects to port on the pod's loopback, IPv4 then IPv6, from a thread inside
// its network namespace: the socket stays in that namespace.
func dialPod(netnsPath string, port int32) (net.Conn, error) {
	var conn net.Conn
	dial := func() error {
		d := net.Dialer{Timeout: 10 * time.Second}
		p := strconv.Itoa(int(port))
		c, err := d.Dial("tcp4", net.JoinHostPort("127.0.0.1", p))
		if err != nil {
			c6, err6 := d.Dial("tcp6", net.JoinHostPort("::1", p))
			if err6 != nil {
				return fmt.Errorf("connect to port %d in the pod: %v (IPv6: %v)", port, err, err6)
			}
			c = c6
		}
		conn = c
		return nil
	}
	var err error
	if netnsPath == "" {
		err = dial()
	} else {
		err = network.InNetNS(netnsPath, dial)
	}
	return conn, err
}
