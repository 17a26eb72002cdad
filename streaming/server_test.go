package streaming

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	utilexec "k8s.io/utils/exec"
)

// fakeBackend runs a tiny command language: "echo" copies stdin to stdout, "exit N"
// writes to stderr and exits with N, "wait" blocks until its context ends, "sizes N"
// prints N terminal sizes. Attach prints "attached" and copies stdin to stdout.
// PortForward writes "port N\n" and echoes.
type fakeBackend struct {
	ended chan string // ids whose "wait" saw its context end
}

func newFakeBackend() *fakeBackend { return &fakeBackend{ended: make(chan string, 16)} }

func (b *fakeBackend) Exec(ctx context.Context, id string, cmd []string, in io.Reader, out, errw io.WriteCloser, tty bool, resize <-chan TerminalSize) error {
	switch cmd[0] {
	case "echo":
		_, _ = io.Copy(out, in)
	case "exit":
		code, _ := strconv.Atoi(cmd[1])
		fmt.Fprint(errw, "bye")
		if code != 0 {
			return ExitError{Code: code}
		}
	case "wait":
		<-ctx.Done()
		b.ended <- id
		return ctx.Err()
	case "sizes":
		n, _ := strconv.Atoi(cmd[1])
		for i := 0; i < n; i++ {
			sz := <-resize
			fmt.Fprintf(out, "%dx%d\n", sz.Width, sz.Height)
		}
	}
	return nil
}

func (b *fakeBackend) Attach(ctx context.Context, id string, in io.Reader, out, errw io.WriteCloser, tty bool, resize <-chan TerminalSize) error {
	fmt.Fprintln(out, "attached")
	_, _ = io.Copy(out, in)
	return nil
}

func (b *fakeBackend) PortForward(ctx context.Context, id string, port int32, stream io.ReadWriteCloser) error {
	if port == 1 {
		return errors.New("connection refused")
	}
	fmt.Fprintf(stream, "port %d\n", port)
	_, err := io.Copy(stream, stream)
	return err
}

func startServer(t *testing.T, cfg Config) (*Server, *fakeBackend) {
	t.Helper()
	b := newFakeBackend()
	s, err := NewServer(cfg, b)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	s.Start(ctx)
	t.Cleanup(func() { cancel(); s.Stop() })
	return s, b
}

func execURL(t *testing.T, s *Server, req *runtimeapi.ExecRequest) string {
	t.Helper()
	resp, err := s.GetExec(context.Background(), req)
	require.NoError(t, err)
	return resp.Url
}

// executor makes a client-go executor for the protocol ("spdy" or "websocket").
func executor(t *testing.T, proto, u string) remotecommand.Executor {
	t.Helper()
	cfg := &rest.Config{TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
	if proto == "websocket" {
		e, err := remotecommand.NewWebSocketExecutor(cfg, "GET", u)
		require.NoError(t, err)
		return e
	}
	parsed, err := url.Parse(u)
	require.NoError(t, err)
	e, err := remotecommand.NewSPDYExecutor(cfg, "POST", parsed)
	require.NoError(t, err)
	return e
}

type sizeQueue struct{ sizes []remotecommand.TerminalSize }

func (q *sizeQueue) Next() *remotecommand.TerminalSize {
	if len(q.sizes) == 0 {
		select {} // no more sizes: the client waits for the session to end
	}
	sz := q.sizes[0]
	q.sizes = q.sizes[1:]
	return &sz
}

func TestURLsAreAbsoluteWithTheRealPort(t *testing.T) {
	s, _ := startServer(t, Config{})
	u, err := url.Parse(execURL(t, s, &runtimeapi.ExecRequest{ContainerId: "c", Cmd: []string{"echo"}, Stdout: true}))
	require.NoError(t, err)
	require.Equal(t, "http", u.Scheme)
	host, port, err := net.SplitHostPort(u.Host)
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1", host)
	require.NotEqual(t, "0", port)
	require.True(t, strings.HasPrefix(u.Path, "/exec/"), u.Path)
	ar, err := s.GetAttach(context.Background(), &runtimeapi.AttachRequest{ContainerId: "c", Stdout: true})
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(ar.Url, s.URL()+"/attach/"), ar.Url)
	pr, err := s.GetPortForward(context.Background(), &runtimeapi.PortForwardRequest{PodSandboxId: "p"})
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(pr.Url, s.URL()+"/portforward/"), pr.Url)
}

func TestExec(t *testing.T) {
	s, _ := startServer(t, Config{})
	for _, proto := range []string{"spdy", "websocket"} {
		t.Run(proto, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			// stdin reaches the command and its end closes the command's stdin.
			u := execURL(t, s, &runtimeapi.ExecRequest{ContainerId: "c", Cmd: []string{"echo"}, Stdin: true, Stdout: true})
			var out bytes.Buffer
			err := executor(t, proto, u).StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: strings.NewReader("hello\n"), Stdout: &out})
			require.NoError(t, err)
			require.Equal(t, "hello\n", out.String())

			// Exit codes: 0 is success, others an ExitError with the code.
			for _, code := range []int{0, 3} {
				u = execURL(t, s, &runtimeapi.ExecRequest{ContainerId: "c", Cmd: []string{"exit", strconv.Itoa(code)}, Stdout: true, Stderr: true})
				var stdout, stderr bytes.Buffer
				err = executor(t, proto, u).StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr})
				require.Equal(t, "bye", stderr.String())
				if code == 0 {
					require.NoError(t, err)
					continue
				}
				var exitErr utilexec.ExitError
				require.ErrorAs(t, err, &exitErr)
				require.Equal(t, code, exitErr.ExitStatus())
			}

			// TTY sizes reach the command.
			u = execURL(t, s, &runtimeapi.ExecRequest{ContainerId: "c", Cmd: []string{"sizes", "2"}, Tty: true, Stdout: true, Stdin: true})
			out.Reset()
			q := &sizeQueue{sizes: []remotecommand.TerminalSize{{Width: 80, Height: 24}, {Width: 132, Height: 43}}}
			pr, pw := io.Pipe()
			defer pw.Close()
			err = executor(t, proto, u).StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: pr, Stdout: &out, Tty: true, TerminalSizeQueue: q})
			require.NoError(t, err)
			require.Equal(t, "80x24\n132x43\n", out.String())
		})
	}
}

func TestAttach(t *testing.T) {
	s, _ := startServer(t, Config{})
	for _, proto := range []string{"spdy", "websocket"} {
		t.Run(proto, func(t *testing.T) {
			resp, err := s.GetAttach(context.Background(), &runtimeapi.AttachRequest{ContainerId: "c", Stdin: true, Stdout: true})
			require.NoError(t, err)
			var out bytes.Buffer
			err = executor(t, proto, resp.Url).StreamWithContext(context.Background(), remotecommand.StreamOptions{Stdin: strings.NewReader("hi\n"), Stdout: &out})
			require.NoError(t, err)
			require.Equal(t, "attached\nhi\n", out.String())
		})
	}
}

// A token works once; an unknown or used one gets 404, whatever the protocol.
func TestTokensAreSingleUse(t *testing.T) {
	s, _ := startServer(t, Config{})
	for _, proto := range []string{"spdy", "websocket"} {
		u := execURL(t, s, &runtimeapi.ExecRequest{ContainerId: "c", Cmd: []string{"exit", "0"}, Stderr: true})
		require.NoError(t, executor(t, proto, u).StreamWithContext(context.Background(), remotecommand.StreamOptions{Stderr: io.Discard}))
		err := executor(t, proto, u).StreamWithContext(context.Background(), remotecommand.StreamOptions{Stderr: io.Discard})
		require.Error(t, err, proto)
		require.Contains(t, err.Error(), "404", proto)
	}
	for _, p := range []string{"/exec/unknown1", "/attach/unknown1", "/portforward/unknown1"} {
		resp, err := http.Post(s.URL()+p, "text/plain", nil)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusNotFound, resp.StatusCode, p)
	}
	require.Zero(t, s.ws.len(), "used tokens are forgotten")
}

// A client that vanishes mid-stream ends the backend's context; so does Stop.
func TestVanishedClientEndsTheStream(t *testing.T) {
	s, b := startServer(t, Config{})
	for _, proto := range []string{"spdy", "websocket"} {
		u := execURL(t, s, &runtimeapi.ExecRequest{ContainerId: proto, Cmd: []string{"wait"}, Stdin: true, Stdout: true})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		pr, pw := io.Pipe()
		go func() {
			done <- executor(t, proto, u).StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: pr, Stdout: io.Discard})
		}()
		time.Sleep(200 * time.Millisecond)
		cancel()
		<-done
		pw.Close()
		select {
		case id := <-b.ended:
			require.Equal(t, proto, id)
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the backend did not see the client leave", proto)
		}
	}
	require.Eventually(t, func() bool { return s.ln.open() == 0 }, 10*time.Second, 50*time.Millisecond)

	u := execURL(t, s, &runtimeapi.ExecRequest{ContainerId: "stop", Cmd: []string{"wait"}, Stdout: true})
	done := make(chan error, 1)
	go func() {
		done <- executor(t, "spdy", u).StreamWithContext(context.Background(), remotecommand.StreamOptions{Stdout: io.Discard})
	}()
	time.Sleep(200 * time.Millisecond)
	s.Stop()
	require.Equal(t, "stop", <-b.ended)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the client did not see Stop")
	}
}

func TestTLS(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	writeSelfSigned(t, certFile, keyFile)
	_, err := NewServer(Config{TLSCertFile: certFile}, newFakeBackend())
	require.ErrorContains(t, err, "both")

	s, _ := startServer(t, Config{TLSCertFile: certFile, TLSKeyFile: keyFile})
	require.True(t, strings.HasPrefix(s.URL(), "https://127.0.0.1:"), s.URL())
	for _, proto := range []string{"spdy", "websocket"} {
		u := execURL(t, s, &runtimeapi.ExecRequest{ContainerId: "c", Cmd: []string{"echo"}, Stdin: true, Stdout: true})
		var out bytes.Buffer
		err := executor(t, proto, u).StreamWithContext(context.Background(), remotecommand.StreamOptions{Stdin: strings.NewReader("secret\n"), Stdout: &out})
		require.NoError(t, err, proto)
		require.Equal(t, "secret\n", out.String(), proto)
	}
}

func writeSelfSigned(t *testing.T, certFile, keyFile string) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "shimd-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	kder, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600))
}
