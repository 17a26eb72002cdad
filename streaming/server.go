// Package streaming serves the Exec, Attach and PortForward streams over HTTP with the
// SIG-Node streaming library (k8s.io/cri-streaming). It knows nothing of containers: a
// Backend, implemented by the runtime, runs the command, attaches or dials.
//
// The library speaks SPDY (what the kubelet uses) and the legacy "channel.k8s.io"
// WebSocket protocols. Current clients (client-go, crictl, critest -websocket-*) speak
// WebSocket "v5.channel.k8s.io" for exec/attach and SPDY tunnelled in WebSocket for
// port forwarding, which the API server normally translates; this package translates
// them itself in front of the library (websocket.go, tunnel.go), so tokens, stream
// handling and exit codes stay the library's.
package streaming

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/containerd/log"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	criStreaming "k8s.io/cri-streaming/pkg/streaming"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"
)

// Backend runs what a stream asks for. It is the library's Runtime interface: Exec,
// Attach and PortForward, each given the client's streams.
type Backend = criStreaming.Runtime

// TerminalSize is a TTY size sent by the client (Width, Height).
type TerminalSize = remotecommand.TerminalSize

// ExitError carries a command's non-zero exit code to the client. Backends return it
// unwrapped: the library recognizes it by a type assertion, not errors.As.
type ExitError struct{ Code int }

var _ utilexec.ExitError = ExitError{}

func (e ExitError) Error() string   { return fmt.Sprintf("command terminated with exit code %d", e.Code) }
func (e ExitError) String() string  { return e.Error() }
func (e ExitError) Exited() bool    { return true }
func (e ExitError) ExitStatus() int { return e.Code }

// Config configures the server.
type Config struct {
	// Address is the IP to listen on; empty means 127.0.0.1.
	Address string
	// Port is the TCP port; 0 picks a free one.
	Port int
	// TLSCertFile and TLSKeyFile, both set, serve HTTPS.
	TLSCertFile, TLSKeyFile string
}

// stopTimeout bounds how long Stop waits for stream handlers after closing their
// connections.
const stopTimeout = 10 * time.Second

// Server is the streaming HTTP server. NewServer listens at once, so the URLs it hands
// out carry the real port even when Config.Port is 0.
//
// Every goroutine it starts is owned by Start (the serve loop) or by a connection,
// and Stop closes all connections, upgraded ones included.
type Server struct {
	lib      criStreaming.Server
	ln       *trackedListener
	listener net.Listener // ln, or a TLS listener over it
	srv      *http.Server
	baseURL  string
	ws       *wsOptions // stream options of handed-out tokens, for WebSocket clients

	// mu guards stopping and handlers.Add; lock order: mu before trackedListener.mu.
	mu       sync.Mutex
	stopping bool
	handlers sync.WaitGroup
	served   chan struct{} // closed when the serve loop returns
	started  bool
	stopOnce sync.Once
}

// NewServer listens as configured and prepares the library's server over backend.
func NewServer(cfg Config, backend Backend) (*Server, error) {
	tlsCfg, err := cfg.tlsConfig()
	if err != nil {
		return nil, err
	}
	addr := cfg.Address
	if addr == "" {
		addr = "127.0.0.1"
	}
	l, err := net.Listen("tcp", net.JoinHostPort(addr, strconv.Itoa(cfg.Port)))
	if err != nil {
		return nil, fmt.Errorf("streaming server: %w", err)
	}
	s := &Server{ln: newTrackedListener(l), ws: newWSOptions(), served: make(chan struct{})}
	base := &url.URL{Scheme: "http", Host: advertisedHost(l.Addr().(*net.TCPAddr))}
	s.listener = s.ln
	if tlsCfg != nil {
		base.Scheme = "https"
		s.listener = tls.NewListener(s.ln, tlsCfg)
	}
	lc := criStreaming.DefaultConfig
	lc.Addr, lc.BaseURL, lc.TLSConfig = l.Addr().String(), base, tlsCfg
	if s.lib, err = criStreaming.NewServer(lc, backend); err != nil {
		l.Close()
		return nil, err
	}
	s.baseURL = base.String()
	s.srv = &http.Server{
		Handler:           http.HandlerFunc(s.serveHTTP),
		ConnContext:       connContext,
		ReadHeaderTimeout: 30 * time.Second,
		// Upgrades need HTTP/1.1: no HTTP/2 over TLS.
		TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){},
	}
	return s, nil
}

func (c Config) tlsConfig() (*tls.Config, error) {
	if c.TLSCertFile == "" && c.TLSKeyFile == "" {
		return nil, nil
	}
	if c.TLSCertFile == "" || c.TLSKeyFile == "" {
		return nil, errors.New("streaming server: TLS needs both a certificate and a key file")
	}
	cert, err := tls.LoadX509KeyPair(c.TLSCertFile, c.TLSKeyFile)
	if err != nil {
		return nil, fmt.Errorf("streaming server: load TLS key pair: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}}, nil
}

// advertisedHost is the host:port put in URLs: a wildcard listen address is reached
// on the loopback address of its family (the kubelet proxies from the same node).
func advertisedHost(a *net.TCPAddr) string {
	ip := a.IP
	switch {
	case ip.IsUnspecified() && ip.To4() != nil:
		ip = net.IPv4(127, 0, 0, 1)
	case ip.IsUnspecified():
		ip = net.IPv6loopback
	}
	return net.JoinHostPort(ip.String(), strconv.Itoa(a.Port))
}

// URL is the server's base URL (scheme://host:port).
func (s *Server) URL() string { return s.baseURL }

// Start serves in a goroutine until ctx ends or Stop is called.
func (s *Server) Start(ctx context.Context) {
	s.mu.Lock()
	if s.started || s.stopping {
		s.mu.Unlock()
		return
	}
	s.started = true
	s.mu.Unlock()
	go func() {
		defer close(s.served)
		if err := s.srv.Serve(s.listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.G(ctx).WithError(err).Error("streaming server stopped")
		}
	}()
	go func() {
		select {
		case <-ctx.Done():
			s.Stop()
		case <-s.served:
		}
	}()
	log.G(ctx).WithField("url", s.baseURL).Info("streaming server serving")
}

// Stop closes the listener and every connection, upgraded streams included (their
// backends see their context end), and waits a bounded time for the handlers.
func (s *Server) Stop() {
	s.stopOnce.Do(func() {
		s.mu.Lock()
		s.stopping = true
		started := s.started
		s.mu.Unlock()
		_ = s.srv.Close() // the listener and connections not upgraded
		_ = s.ln.Close()  // in case Start never ran
		s.ln.closeAll()   // upgraded (hijacked) connections
		if started {
			<-s.served
		}
		done := make(chan struct{})
		go func() { s.handlers.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(stopTimeout):
			log.L.Warn("streaming handlers did not finish in time")
		}
	})
}

// GetExec returns the URL of an exec stream; the request must be validated already.
func (s *Server) GetExec(_ context.Context, req *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error) {
	resp, err := s.lib.GetExec(req)
	if err != nil {
		return nil, err
	}
	s.ws.put(tokenOf(resp.Url), streamOptions{stdin: req.Stdin, stdout: req.Stdout, stderr: req.Stderr, tty: req.Tty})
	return resp, nil
}

// GetAttach returns the URL of an attach stream; the request must be validated already.
func (s *Server) GetAttach(_ context.Context, req *runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error) {
	resp, err := s.lib.GetAttach(req)
	if err != nil {
		return nil, err
	}
	s.ws.put(tokenOf(resp.Url), streamOptions{stdin: req.Stdin, stdout: req.Stdout, stderr: req.Stderr, tty: req.Tty})
	return resp, nil
}

// GetPortForward returns the URL of a port-forward stream.
func (s *Server) GetPortForward(_ context.Context, req *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error) {
	return s.lib.GetPortForward(req)
}

func tokenOf(u string) string { return path.Base(u) }

// serveHTTP counts the handler (for Stop) and routes WebSocket clients the library
// cannot speak to the translators; everything else is the library's.
func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		http.Error(w, "streaming server is stopping", http.StatusServiceUnavailable)
		return
	}
	s.handlers.Add(1)
	s.mu.Unlock()
	defer s.handlers.Done()
	switch {
	case isTunnelRequest(r):
		s.serveTunnel(w, r)
	case isV5Request(r):
		s.serveV5(w, r)
	default:
		s.ws.take(tokenOf(r.URL.Path)) // a token is used once, whatever the protocol
		s.lib.ServeHTTP(w, r)
	}
}

func hasPathPrefix(r *http.Request, prefixes ...string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(r.URL.Path, p) {
			return true
		}
	}
	return false
}
