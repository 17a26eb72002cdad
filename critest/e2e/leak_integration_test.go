//go:build integration

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	utilexec "k8s.io/utils/exec"

	"github.com/shimd/shimd/critest/harness"
)

// 500 exec and 200 attach sessions over both protocols, two in five of them cut off
// mid-stream by their client (context cancelled) or by the network (connections
// reset): afterwards shimd's goroutines and open descriptors are back where they
// started and no exec process is left in the container.
func TestStreamingLeaks(t *testing.T) {
	requireRoot(t)
	sock := filepath.Join(t.TempDir(), "debug.sock")
	env, _ := imageEnv(t, harness.Options{Shimd: harness.ShimdOptions{ExtraConfig: fmt.Sprintf("[debug]\naddress = %q\n", sock)}})
	pull(t, env, busyboxImage)
	rs := env.Shimd.Runtime(t)
	pod := newPod(t, rs, "leaks")
	cfg := pod.container("main", "sh", "-c", "while :; do echo tick; sleep 0.1; done")
	cfg.Stdin = true
	id := pod.run(cfg)
	debug := debugClient(sock)
	l := &leakRun{t: t, rs: rs, id: id}

	l.run(20, l.exec) // warm up: connections and pools that stay
	l.run(8, l.attach)
	base := stableStats(t, debug)
	t.Logf("baseline: %d goroutines, %d open fds", base.Goroutines, base.OpenFDs)
	start := time.Now()
	l.run(500, l.exec)
	t.Logf("500 exec sessions in %s", time.Since(start).Round(time.Millisecond))
	start = time.Now()
	l.run(200, l.attach)
	t.Logf("200 attach sessions in %s", time.Since(start).Round(time.Millisecond))
	peak := getStats(t, debug)
	t.Logf("just after: %d goroutines, %d open fds", peak.Goroutines, peak.OpenFDs)

	waitSettled(t, debug, base, debugStats{Goroutines: 10, OpenFDs: 4}, 90*time.Second)

	require.Eventually(t, func() bool {
		out, err := execSync(t, rs, id, 10, "ps")
		return err == nil && !strings.Contains(string(out.Stdout), "3133") && !strings.Contains(string(out.Stdout), "cat")
	}, 30*time.Second, 200*time.Millisecond, "exec processes linger in the container")
	require.Equal(t, runtimeapi.ContainerState_CONTAINER_RUNNING, containerStatus(t, rs, id).State, "attach clients leaving stop nothing")
	stopRemove(t, rs, pod.id)
}

type leakRun struct {
	t  *testing.T
	rs runtimeapi.RuntimeServiceClient
	id string
}

// run runs n sessions, four at a time, and fails the test on the first error.
func (l *leakRun) run(n int, session func(ctx context.Context, i int) error) {
	l.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	next := make(chan int)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
				if err := session(sctx, i); err != nil {
					errs <- fmt.Errorf("session %d: %w", i, err)
				}
				scancel()
			}
		}()
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		l.t.Fatal(err)
	}
}

// exec is one exec session of five kinds: to the end (exit 0, SPDY; exit 3 with stdin
// echoed, WebSocket) or cut off once output flows (client cancels, SPDY; connection
// reset, WebSocket; connection reset with a TTY, SPDY).
func (l *leakRun) exec(ctx context.Context, i int) error {
	req := &runtimeapi.ExecRequest{ContainerId: l.id, Stdout: true, Cmd: []string{"sh", "-c", fmt.Sprintf("echo start; exec sleep 3133%d", i%5)}}
	proto := protocols[i%2]
	switch i % 5 {
	case 0:
		req.Cmd = []string{"true"}
	case 1:
		req.Cmd, req.Stdin = []string{"sh", "-c", "cat; exit 3"}, true
	case 4:
		req.Stdin, req.Tty = true, true
	}
	resp, err := l.rs.Exec(ctx, req)
	if err != nil {
		return err
	}
	switch i % 5 {
	case 0:
		return l.stream(ctx, proto, resp.Url, remotecommand.StreamOptions{Stdout: io.Discard})
	case 1:
		var out bytes.Buffer
		err := l.stream(ctx, proto, resp.Url, remotecommand.StreamOptions{Stdin: strings.NewReader("x\n"), Stdout: &out})
		var exitErr utilexec.ExitError
		if !errors.As(err, &exitErr) || exitErr.ExitStatus() != 3 || out.String() != "x\n" {
			return fmt.Errorf("want exit code 3 and x, got %v and %q", err, out.String())
		}
		return nil
	default:
		return l.cutOff(ctx, proto, resp.Url, "start", i%5 != 2, req.Stdin, req.Tty)
	}
}

// attach is one attach session to the ticking container: stdin's end detaches it
// (WebSocket), or it is cut off once ticks arrive (client cancels, SPDY; connection
// reset, either protocol).
func (l *leakRun) attach(ctx context.Context, i int) error {
	resp, err := l.rs.Attach(ctx, &runtimeapi.AttachRequest{ContainerId: l.id, Stdin: true, Stdout: true})
	if err != nil {
		return err
	}
	proto := protocols[i%2]
	switch i % 4 {
	case 1:
		out := &syncBuffer{}
		pr, pw := io.Pipe()
		done := make(chan error, 1)
		go func() { done <- l.stream(ctx, proto, resp.Url, remotecommand.StreamOptions{Stdin: pr, Stdout: out}) }()
		for !strings.Contains(out.String(), "tick") && ctx.Err() == nil {
			time.Sleep(10 * time.Millisecond)
		}
		pw.Close()
		return <-done
	default:
		return l.cutOff(ctx, proto, resp.Url, "tick", i%4 != 0, true, false)
	}
}

func (l *leakRun) stream(ctx context.Context, proto, u string, opts remotecommand.StreamOptions) error {
	e, err := newExecutor(proto, u)
	if err != nil {
		return err
	}
	return e.StreamWithContext(ctx, opts)
}

// cutOff streams until the output holds want, then cancels the client or, with
// reset, resets its TCP connection from a proxy in between.
func (l *leakRun) cutOff(ctx context.Context, proto, u, want string, reset, stdin, tty bool) error {
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cut := cancel
	if reset {
		p, err := newResetProxy(u)
		if err != nil {
			return err
		}
		defer p.reset()
		u, cut = p.url, p.reset
	}
	out := &syncBuffer{}
	opts := remotecommand.StreamOptions{Stdout: out, Tty: tty}
	if stdin {
		pr, pw := io.Pipe()
		defer pw.Close()
		opts.Stdin = pr
	}
	done := make(chan error, 1)
	go func() { done <- l.stream(cctx, proto, u, opts) }()
	for !strings.Contains(out.String(), want) {
		select {
		case err := <-done:
			return fmt.Errorf("ended before %q: %v", want, err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	cut()
	<-done
	return nil
}

// resetProxy relays TCP connections to a streaming URL's server; reset cuts them all
// with a RST, as a vanished client would.
type resetProxy struct {
	url   string
	l     net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func newResetProxy(target string) (*resetProxy, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &resetProxy{l: l}
	server := u.Host
	u.Host = l.Addr().String()
	p.url = u.String()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", server)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(s, c) }()
			go func() { _, _ = io.Copy(c, s) }()
		}
	}()
	return p, nil
}

func (p *resetProxy) reset() {
	p.l.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.(*net.TCPConn).SetLinger(0)
		c.Close()
	}
	p.conns = nil
}

type debugStats struct {
	Goroutines int `json:"goroutines"`
	OpenFDs    int `json:"open_fds"`
}

func debugClient(sock string) *http.Client { return harness.UnixHTTPClient(sock, 10*time.Second) }

func debugGet(c *http.Client, path string) ([]byte, error) {
	resp, err := c.Get("http://shimd" + path)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

func getStats(t *testing.T, c *http.Client) debugStats {
	t.Helper()
	body, err := debugGet(c, "/debug/stats")
	require.NoError(t, err)
	var s debugStats
	require.NoError(t, json.Unmarshal(body, &s), "%s", body)
	return s
}

// waitSettled waits until shimd's goroutines and descriptors are back within slack
// of base, and fails the test with a goroutine dump if they are not by timeout.
func waitSettled(t *testing.T, debug *http.Client, base, slack debugStats, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		now := getStats(t, debug)
		if now.Goroutines <= base.Goroutines+slack.Goroutines && now.OpenFDs <= base.OpenFDs+slack.OpenFDs {
			t.Logf("settled: %d goroutines, %d open fds", now.Goroutines, now.OpenFDs)
			return
		}
		if time.Now().After(deadline) {
			dump, _ := debugGet(debug, "/debug/pprof/goroutine?debug=1")
			t.Fatalf("not back to baseline (%+v) after %s: %+v\n%s", base, timeout, now, dump)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// stableStats waits until two reads a second apart agree (at most 15s) and returns
// the lower.
func stableStats(t *testing.T, c *http.Client) debugStats {
	prev := getStats(t, c)
	for i := 0; i < 15; i++ {
		time.Sleep(time.Second)
		now := getStats(t, c)
		if now == prev {
			return now
		}
		if now.Goroutines < prev.Goroutines {
			prev = now
		}
	}
	return prev
}

// newExecutor is a client-go executor for proto ("spdy" or "websocket").
func newExecutor(proto, u string) (remotecommand.Executor, error) {
	cfg := &rest.Config{TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
	if proto == "websocket" {
		return remotecommand.NewWebSocketExecutor(cfg, "GET", u)
	}
	parsed, err := url.Parse(u)
	if err != nil {
		return nil, err
	}
	return remotecommand.NewSPDYExecutor(cfg, "POST", parsed)
}

// syncBuffer is a bytes.Buffer safe to read while a stream writes it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
