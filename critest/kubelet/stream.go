//go:build integration

package kubelet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
	utilexec "k8s.io/client-go/util/exec"
)

// restConfig points client-go at the kubelet's authenticated port; the
// kubelet serves a self-signed certificate and allows anonymous requests.
func (k *Kubelet) restConfig() *rest.Config {
	return &rest.Config{
		Host:            k.URL(),
		TLSClientConfig: rest.TLSClientConfig{Insecure: true},
		Timeout:         30 * time.Second,
	}
}

// Transport selects the streaming protocol of Exec.
type Transport string

const (
	SPDY      Transport = "spdy"
	WebSocket Transport = "websocket"
)

// ExecRequest is one /exec call.
type ExecRequest struct {
	Pod, Container string
	Command        []string
	Stdin          string // sent, then closed; empty: no stdin stream
	TTY            bool
	Transport      Transport
}

// ExecResult is what an exec wrote and how it ended.
type ExecResult struct {
	Stdout, Stderr string
	// ExitCode of the command (0 when the stream ended without error).
	ExitCode int
}

// Exec runs a command through the kubelet's /exec/<ns>/<pod>/<container>,
// which the kubelet proxies to the runtime's streaming URL. A non-zero exit
// is returned in ExitCode, not as an error.
func (k *Kubelet) Exec(ctx context.Context, r ExecRequest) (ExecResult, error) {
	q := url.Values{}
	for _, c := range r.Command {
		q.Add("command", c)
	}
	q.Set("output", "1")
	if !r.TTY {
		q.Set("error", "1")
	}
	if r.Stdin != "" {
		q.Set("input", "1")
	}
	if r.TTY {
		q.Set("tty", "1")
	}
	u, err := url.Parse(fmt.Sprintf("%s/exec/%s/%s/%s?%s", k.URL(), Namespace, k.MirrorName(r.Pod), r.Container, q.Encode()))
	if err != nil {
		return ExecResult{}, err
	}
	var ex remotecommand.Executor
	switch r.Transport {
	case WebSocket:
		ex, err = remotecommand.NewWebSocketExecutor(k.restConfig(), "GET", u.String())
	default:
		ex, err = remotecommand.NewSPDYExecutor(k.restConfig(), "POST", u)
	}
	if err != nil {
		return ExecResult{}, err
	}
	var stdout, stderr bytes.Buffer
	opts := remotecommand.StreamOptions{Stdout: &stdout, Tty: r.TTY}
	if !r.TTY {
		opts.Stderr = &stderr
	}
	if r.Stdin != "" {
		opts.Stdin = strings.NewReader(r.Stdin)
	}
	err = ex.StreamWithContext(ctx, opts)
	res := ExecResult{Stdout: stdout.String(), Stderr: stderr.String()}
	var exit utilexec.ExitError
	if errors.As(err, &exit) && exit.Exited() {
		res.ExitCode = exit.ExitStatus()
		return res, nil
	}
	return res, err
}

// PortForward opens a SPDY port-forward through the kubelet's
// /portForward/<ns>/<pod> to the pod's port, listening on a free local
// port, which it returns with a function that closes it.
func (k *Kubelet) PortForward(pod string, port int) (local int, stop func(), err error) {
	u, err := url.Parse(fmt.Sprintf("%s/portForward/%s/%s", k.URL(), Namespace, k.MirrorName(pod)))
	if err != nil {
		return 0, nil, err
	}
	transport, upgrader, err := spdy.RoundTripperFor(k.restConfig())
	if err != nil {
		return 0, nil, err
	}
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, "POST", u)
	stopCh, readyCh := make(chan struct{}), make(chan struct{})
	var out, errOut bytes.Buffer
	pf, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{fmt.Sprintf("0:%d", port)}, stopCh, readyCh, &out, &errOut)
	if err != nil {
		return 0, nil, err
	}
	done := make(chan error, 1)
	go func() { done <- pf.ForwardPorts() }()
	select {
	case <-readyCh:
	case err := <-done:
		return 0, nil, fmt.Errorf("port-forward ended before it was ready: %v (%s)", err, strings.TrimSpace(errOut.String()))
	case <-time.After(30 * time.Second):
		close(stopCh)
		return 0, nil, fmt.Errorf("port-forward not ready after 30s (%s)", strings.TrimSpace(errOut.String()))
	}
	ports, err := pf.GetPorts()
	if err != nil || len(ports) != 1 {
		close(stopCh)
		return 0, nil, fmt.Errorf("port-forward ports %v: %v", ports, err)
	}
	var once sync.Once
	return int(ports[0].Local), func() {
		once.Do(func() {
			close(stopCh)
			<-done
		})
	}, nil
}

// httpGet fetches a URL with a short timeout and returns status and body.
func httpGet(ctx context.Context, u string) (int, string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, "", err
	}
	// No keep-alive: each check is a fresh connection through the DNAT or tunnel.
	req.Close = true
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}
