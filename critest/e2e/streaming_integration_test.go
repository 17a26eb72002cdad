//go:build integration

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	streamhttp "k8s.io/streaming/pkg/httpstream"
	utilexec "k8s.io/utils/exec"

	"github.com/shimd/shimd/critest/harness"
)

// Both protocols a client may use: SPDY (the kubelet) and WebSocket (client-go's
// default; crictl and critest with -websocket-*).
var protocols = []string{"spdy", "websocket"}

// executor is the client kubectl and critest use, for either protocol.
func executor(t *testing.T, proto, u string) remotecommand.Executor {
	t.Helper()
	e, err := newExecutor(proto, u)
	require.NoError(t, err)
	return e
}

func execURL(t *testing.T, rs runtimeapi.RuntimeServiceClient, req *runtimeapi.ExecRequest) string {
	t.Helper()
	resp, err := rs.Exec(ctxT(t, 30*time.Second), req)
	require.NoError(t, err)
	u, err := url.Parse(resp.Url)
	require.NoError(t, err)
	require.Equal(t, "http", u.Scheme, "absolute URL: %s", resp.Url)
	require.True(t, strings.HasPrefix(u.Host, "127.0.0.1:"), resp.Url)
	return resp.Url
}

func attachURL(t *testing.T, rs runtimeapi.RuntimeServiceClient, req *runtimeapi.AttachRequest) string {
	t.Helper()
	resp, err := rs.Attach(ctxT(t, 30*time.Second), req)
	require.NoError(t, err)
	return resp.Url
}

// sizeQueue hands out its sizes, then blocks until done is closed.
type sizeQueue struct {
	sizes []remotecommand.TerminalSize
	done  chan struct{}
}

func (q *sizeQueue) Next() *remotecommand.TerminalSize {
	if len(q.sizes) == 0 {
		<-q.done
		return nil
	}
	sz := q.sizes[0]
	q.sizes = q.sizes[1:]
	return &sz
}

func waitOutput(t *testing.T, b *syncBuffer, want string) {
	t.Helper()
	require.Eventually(t, func() bool { return strings.Contains(b.String(), want) }, 30*time.Second, 20*time.Millisecond,
		"output never had %q", want)
}

func streamingPod(t *testing.T, name string) (*harness.Env, runtimeapi.RuntimeServiceClient, *podFixture) {
	requireRoot(t)
	env, _ := imageEnv(t, harness.Options{})
	pull(t, env, busyboxImage)
	rs := env.Shimd.Runtime(t)
	return env, rs, newPod(t, rs, name)
}

func TestStreamingExec(t *testing.T) {
	_, rs, pod := streamingPod(t, "exec-stream")
	cfg := pod.container("main", "sleep", "100000")
	cfg.Envs = []*runtimeapi.KeyValue{{Key: "GREETING", Value: []byte("hi there")}}
	cfg.WorkingDir = "/tmp"
	id := pod.run(cfg)
	for _, proto := range protocols {
		t.Run(proto, func(t *testing.T) {
			ctx := ctxT(t, 2*time.Minute)
			// stdin reaches the command; its end ends the command's stdin.
			u := execURL(t, rs, &runtimeapi.ExecRequest{ContainerId: id, Cmd: []string{"cat"}, Stdin: true, Stdout: true})
			var out bytes.Buffer
			require.NoError(t, executor(t, proto, u).StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: strings.NewReader("echo me\n"), Stdout: &out}))
			require.Equal(t, "echo me\n", out.String())

			// The container's env, user and working directory; exit codes 0 and 3.
			for _, code := range []int{0, 3} {
				u = execURL(t, rs, &runtimeapi.ExecRequest{ContainerId: id, Stdout: true, Stderr: true,
					Cmd: []string{"sh", "-c", fmt.Sprintf("echo $GREETING; id -u; pwd; echo oops >&2; exit %d", code)}})
				var stdout, stderr bytes.Buffer
				err := executor(t, proto, u).StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr})
				require.Equal(t, "hi there\n0\n/tmp\n", stdout.String())
				require.Equal(t, "oops\n", stderr.String())
				if code == 0 {
					require.NoError(t, err)
					continue
				}
				var exitErr utilexec.ExitError
				require.ErrorAs(t, err, &exitErr)
				require.Equal(t, code, exitErr.ExitStatus())
			}

			// A TTY gets the client's size, as stty sees it.
			u = execURL(t, rs, &runtimeapi.ExecRequest{ContainerId: id, Tty: true, Stdin: true, Stdout: true,
				Cmd: []string{"sh", "-c", `for i in $(seq 100); do s=$(stty size); [ "$s" = "43 132" ] && break; sleep 0.1; done; echo "size $s"`}})
			q := &sizeQueue{sizes: []remotecommand.TerminalSize{{Width: 132, Height: 43}}, done: make(chan struct{})}
			defer close(q.done)
			pr, pw := io.Pipe()
			defer pw.Close()
			out.Reset()
			require.NoError(t, executor(t, proto, u).StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: pr, Stdout: &out, Tty: true, TerminalSizeQueue: q}))
			require.Contains(t, out.String(), "size 43 132")
		})
	}
	// A URL works once: the second use gets 404.
	u := execURL(t, rs, &runtimeapi.ExecRequest{ContainerId: id, Cmd: []string{"true"}, Stdout: true})
	require.NoError(t, executor(t, "spdy", u).StreamWithContext(ctxT(t, time.Minute), remotecommand.StreamOptions{Stdout: io.Discard}))
	resp, err := http.Post(u, "text/plain", nil)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	stopRemove(t, rs, pod.id)
}

func TestStreamingBadRequests(t *testing.T) {
	_, rs, pod := streamingPod(t, "stream-bad")
	id := pod.run(pod.container("main", "sleep", "100000"))
	done := pod.run(pod.container("done", "true"))
	waitExited(t, rs, done)
	ctx := ctxT(t, time.Minute)
	for _, tt := range []struct {
		name string
		req  *runtimeapi.ExecRequest
		code codes.Code
	}{
		{"tty and stderr", &runtimeapi.ExecRequest{ContainerId: id, Cmd: []string{"true"}, Tty: true, Stdout: true, Stderr: true}, codes.InvalidArgument},
		{"empty cmd", &runtimeapi.ExecRequest{ContainerId: id, Stdout: true}, codes.InvalidArgument},
		{"no streams", &runtimeapi.ExecRequest{ContainerId: id, Cmd: []string{"true"}}, codes.InvalidArgument},
		{"no id", &runtimeapi.ExecRequest{Cmd: []string{"true"}, Stdout: true}, codes.InvalidArgument},
		{"unknown id", &runtimeapi.ExecRequest{ContainerId: "nonexistent", Cmd: []string{"true"}, Stdout: true}, codes.NotFound},
		{"exited", &runtimeapi.ExecRequest{ContainerId: done, Cmd: []string{"true"}, Stdout: true}, codes.FailedPrecondition},
	} {
		_, err := rs.Exec(ctx, tt.req)
		require.Equal(t, tt.code, status.Code(err), "exec %s: %v", tt.name, err)
		if tt.name != "empty cmd" {
			_, err = rs.Attach(ctx, &runtimeapi.AttachRequest{ContainerId: tt.req.ContainerId, Tty: tt.req.Tty, Stdout: tt.req.Stdout, Stderr: tt.req.Stderr})
			require.Equal(t, tt.code, status.Code(err), "attach %s: %v", tt.name, err)
		}
	}
	_, err := rs.PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: "nonexistent"})
	require.Equal(t, codes.NotFound, status.Code(err), "%v", err)
	_, err = rs.PortForward(ctx, &runtimeapi.PortForwardRequest{})
	require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	_, err = rs.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod.id})
	require.NoError(t, err)
	_, err = rs.PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: pod.id})
	require.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)
	stopRemove(t, rs, pod.id)
}

// Two clients attached at once both see the output; one leaving stops nothing; with
// stdin_once the first attacher's end of input closes the container's stdin.
func TestStreamingAttach(t *testing.T) {
	_, rs, pod := streamingPod(t, "attach")
	cfg := pod.container("echoer", "sh", "-c", `while read l; do echo "got $l"; done; echo "stdin closed"; sleep 100000`)
	cfg.Stdin = true
	id := pod.run(cfg)
	ctx := ctxT(t, 2*time.Minute)
	var outs [2]*syncBuffer
	var ins [2]*io.PipeWriter
	var cancels [2]context.CancelFunc
	errs := make(chan error, 2)
	for i, proto := range protocols {
		outs[i] = &syncBuffer{}
		var pr *io.PipeReader
		pr, ins[i] = io.Pipe()
		cctx, cancel := context.WithCancel(ctx)
		cancels[i] = cancel
		u := attachURL(t, rs, &runtimeapi.AttachRequest{ContainerId: id, Stdin: true, Stdout: true, Stderr: true})
		e := executor(t, proto, u)
		go func() {
			errs <- e.StreamWithContext(cctx, remotecommand.StreamOptions{Stdin: pr, Stdout: outs[i], Stderr: io.Discard})
		}()
	}
	// Attachment is asynchronous: send until both clients see a line.
	require.Eventually(t, func() bool {
		_, _ = ins[0].Write([]byte("ping\n"))
		time.Sleep(100 * time.Millisecond)
		return strings.Contains(outs[0].String(), "got ping") && strings.Contains(outs[1].String(), "got ping")
	}, 30*time.Second, 10*time.Millisecond)
	cancels[0]() // the SPDY client leaves
	<-errs
	_, err := ins[1].Write([]byte("pong\n"))
	require.NoError(t, err)
	waitOutput(t, outs[1], "got pong")
	require.Equal(t, runtimeapi.ContainerState_CONTAINER_RUNNING, containerStatus(t, rs, id).State)
	require.NoError(t, ins[1].Close()) // without stdin_once: the client detaches, stdin stays
	require.NoError(t, <-errs)
	require.NotContains(t, outs[1].String(), "stdin closed")
	cancels[1]()

	// stdin_once: input's end reaches the container, whose output still comes.
	cfg = pod.container("once", "sh", "-c", `while read l; do echo "got $l"; done; echo "stdin closed"`)
	cfg.Stdin, cfg.StdinOnce = true, true
	once := pod.run(cfg)
	u := attachURL(t, rs, &runtimeapi.AttachRequest{ContainerId: once, Stdin: true, Stdout: true})
	var out bytes.Buffer
	err = executor(t, "websocket", u).StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: strings.NewReader("one\n"), Stdout: &out})
	require.NoError(t, err)
	require.Contains(t, out.String(), "stdin closed")
	require.Equal(t, int32(0), waitExited(t, rs, once).ExitCode)

	// A TTY container: resize reaches its terminal.
	cfg = pod.container("tty", "sh")
	cfg.Stdin, cfg.Tty = true, true
	tty := pod.run(cfg)
	u = attachURL(t, rs, &runtimeapi.AttachRequest{ContainerId: tty, Stdin: true, Stdout: true, Tty: true})
	q := &sizeQueue{sizes: []remotecommand.TerminalSize{{Width: 101, Height: 31}}, done: make(chan struct{})}
	defer close(q.done)
	pr, pw := io.Pipe()
	ttyOut := &syncBuffer{}
	go func() {
		errs <- executor(t, "spdy", u).StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: pr, Stdout: ttyOut, Tty: true, TerminalSizeQueue: q})
	}()
	require.Eventually(t, func() bool {
		_, _ = pw.Write([]byte("stty size\n"))
		time.Sleep(200 * time.Millisecond)
		return strings.Contains(ttyOut.String(), "31 101")
	}, 30*time.Second, 10*time.Millisecond)
	// Output reaches attached clients as it comes, not by lines: the prompt after it.
	require.Eventually(t, func() bool {
		s := ttyOut.String()
		return strings.Contains(s[strings.LastIndex(s, "31 101"):], "# ")
	}, 10*time.Second, 10*time.Millisecond)
	_, _ = pw.Write([]byte("exit\n"))
	require.NoError(t, <-errs)
	waitExited(t, rs, tty)
	stopRemove(t, rs, pod.id)
}

// forward starts a client-go port forwarder on 127.0.0.1 and returns the local port.
func forward(t *testing.T, proto, u string, remote int) int {
	t.Helper()
	parsed, err := url.Parse(u)
	require.NoError(t, err)
	cfg := &rest.Config{}
	var d streamhttp.Dialer
	if proto == "websocket" {
		d, err = portforward.NewSPDYOverWebsocketDialerForStreaming(parsed, cfg)
		require.NoError(t, err)
	} else {
		tr, up, err := spdy.RoundTripperFor(cfg)
		require.NoError(t, err)
		d = spdy.NewDialerForStreaming(up, &http.Client{Transport: tr}, "POST", parsed)
	}
	stop, ready := make(chan struct{}), make(chan struct{})
	pf, err := portforward.NewOnAddressesForStreaming(d, []string{"127.0.0.1"}, []string{fmt.Sprintf("0:%d", remote)}, stop, ready, io.Discard, io.Discard)
	require.NoError(t, err)
	errc := make(chan error, 1)
	go func() { errc <- pf.ForwardPorts() }()
	t.Cleanup(func() { close(stop); <-errc })
	select {
	case <-ready:
	case err := <-errc:
		t.Fatalf("port forward: %v", err)
	}
	ports, err := pf.GetPorts()
	require.NoError(t, err)
	return int(ports[0].Local)
}

// httpd serves "hello from <name>" on 127.0.0.1:port only: reachable only from the
// pod's own network namespace.
func httpd(name string, port int) []string {
	return []string{"sh", "-c", fmt.Sprintf("mkdir -p /www && echo hello from %s > /www/index.html && exec httpd -f -p 127.0.0.1:%d -h /www", name, port)}
}

// fetch GETs url once and returns the body or the error's text.
func fetch(url string) string {
	client := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	resp, err := client.Get(url)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// waitServing waits until the web server in container id answers on its loopback: a
// refused port would end a client-go forwarder.
func waitServing(t *testing.T, rs runtimeapi.RuntimeServiceClient, id string, port int) {
	t.Helper()
	require.Eventually(t, func() bool {
		resp, err := execSync(t, rs, id, 10, "wget", "-q", "-O", "/dev/null", fmt.Sprintf("http://127.0.0.1:%d/index.html", port))
		return err == nil && resp.ExitCode == 0
	}, 30*time.Second, 100*time.Millisecond)
}

func TestStreamingPortForward(t *testing.T) {
	env, rs, pod := streamingPod(t, "pf")
	waitServing(t, rs, pod.run(pod.container("web", httpd("the pod", 8080)...)), 8080)
	resp, err := rs.PortForward(ctxT(t, 30*time.Second), &runtimeapi.PortForwardRequest{PodSandboxId: pod.id})
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(resp.Url, "http://127.0.0.1:"), resp.Url)
	for _, proto := range protocols {
		resp, err := rs.PortForward(ctxT(t, 30*time.Second), &runtimeapi.PortForwardRequest{PodSandboxId: pod.id, Port: []int32{8080}})
		require.NoError(t, err)
		local := forward(t, proto, resp.Url, 8080)
		bodies := make(chan string, 4)
		for i := 0; i < 4; i++ { // concurrent connections
			go func() { bodies <- fetch(fmt.Sprintf("http://127.0.0.1:%d/index.html", local)) }()
		}
		for i := 0; i < 4; i++ {
			require.Equal(t, "hello from the pod\n", <-bodies, proto)
		}
	}

	// A host-network pod: the host's loopback.
	port := freePort(t)
	cfg := podConfig("pf-host")
	cfg.Linux.SecurityContext.NamespaceOptions = &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE}
	hostPod := newPodOf(t, rs, cfg)
	waitServing(t, rs, hostPod.run(hostPod.container("web", httpd("the host pod", port)...)), port)
	resp, err = rs.PortForward(ctxT(t, 30*time.Second), &runtimeapi.PortForwardRequest{PodSandboxId: hostPod.id})
	require.NoError(t, err)
	local := forward(t, "spdy", resp.Url, port)
	require.Equal(t, "hello from the host pod\n", httpGet(t, fmt.Sprintf("http://127.0.0.1:%d/index.html", local)))

	// crictl port-forward, both transports, with curl through it.
	for _, proto := range protocols {
		lp := freePort(t)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cmd := exec.CommandContext(ctx, env.Tools.Crictl, append(env.Shimd.CrictlFlags(),
			"port-forward", "--transport", proto, pod.id, fmt.Sprintf("%d:8080", lp))...)
		var log syncBuffer
		cmd.Stdout, cmd.Stderr = &log, &log
		require.NoError(t, cmd.Start())
		waitOutput(t, &log, "Forwarding from")
		curl := exec.Command("curl", "-sS", "--noproxy", "*", "--max-time", "20", fmt.Sprintf("http://127.0.0.1:%d/index.html", lp))
		body, err := curl.Output()
		cancel()
		_ = cmd.Wait()
		require.NoError(t, err, "crictl said: %s", log.String())
		require.Equal(t, "hello from the pod\n", string(body), proto)
	}
	stopRemove(t, rs, hostPod.id)
	stopRemove(t, rs, pod.id)
}

func TestStreamingCrictl(t *testing.T) {
	env, rs, pod := streamingPod(t, "crictl-stream")
	id := pod.run(pod.container("main", "sleep", "100000"))
	for _, proto := range protocols {
		out, err := env.Shimd.Crictl(t, "exec", "--transport", proto, id, "echo", "hello", proto)
		require.NoError(t, err)
		require.Equal(t, "hello "+proto+"\n", out)
		// crictl exits 1 but reports the code the stream carried.
		_, err = env.Shimd.Crictl(t, "exec", "--transport", proto, id, "sh", "-c", "exit 3")
		require.ErrorContains(t, err, "exit code 3", proto)
	}
	// exec -it needs a terminal: script gives crictl one, sized by stty. The size
	// reaches the process just after it starts, hence the loop.
	if _, err := exec.LookPath("script"); err == nil {
		loop := `for i in $(seq 100); do s=$(stty size 2>/dev/null); [ "$s" = "22 77" ] && break; sleep 0.1; done; echo "size $s"`
		line := fmt.Sprintf("stty cols 77 rows 22; %s %s exec -it %s sh -c '%s'", env.Tools.Crictl, strings.Join(env.Shimd.CrictlFlags(), " "), id, loop)
		out, err := exec.Command("script", "-qec", line, "/dev/null").CombinedOutput()
		require.NoError(t, err, "%s", out)
		require.Contains(t, string(out), "size 22 77")
	} else {
		t.Log("script(1) is missing: crictl exec -it not run")
	}
	// attach: crictl follows the output until the container's ends.
	ticker := pod.run(pod.container("ticker", "sh", "-c", "sleep 1; for i in $(seq 30); do echo tick $i; sleep 0.2; done"))
	out, err := env.Shimd.Crictl(t, "attach", ticker)
	require.NoError(t, err)
	require.Contains(t, out, "tick 30")
	stopRemove(t, rs, pod.id)
}
