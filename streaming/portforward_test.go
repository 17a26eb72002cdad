package streaming

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	streamhttp "k8s.io/streaming/pkg/httpstream"
)

func TestPortForward(t *testing.T) {
	s, _ := startServer(t, Config{})
	for _, proto := range []string{"spdy", "websocket"} {
		t.Run(proto, func(t *testing.T) {
			resp, err := s.GetPortForward(context.Background(), &runtimeapi.PortForwardRequest{PodSandboxId: "p"})
			require.NoError(t, err)
			local := forward(t, proto, resp.Url, "8080")
			// Concurrent connections each get their own stream.
			var wg sync.WaitGroup
			for i := 0; i < 3; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(local))))
					if err != nil {
						t.Error(err)
						return
					}
					defer c.Close()
					msg := fmt.Sprintf("ping %d\n", i)
					_, _ = c.Write([]byte(msg))
					want := "port 8080\n" + msg
					got := make([]byte, len(want))
					_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
					if _, err := io.ReadFull(c, got); err != nil || string(got) != want {
						t.Errorf("got %q (%v), want %q", got, err, want)
					}
				}()
			}
			wg.Wait()
		})
	}
}

// A port that cannot be reached reports an error on its error stream; the other
// streams of the connection keep working. (client-go's forwarder closes the whole
// connection on such an error, so this speaks the protocol itself.)
func TestPortForwardRefusedPortLeavesOthersAlone(t *testing.T) {
	s, _ := startServer(t, Config{})
	for _, proto := range []string{"spdy", "websocket"} {
		t.Run(proto, func(t *testing.T) {
			resp, err := s.GetPortForward(context.Background(), &runtimeapi.PortForwardRequest{PodSandboxId: "p"})
			require.NoError(t, err)
			conn, _, err := pfDialer(t, proto, resp.Url).Dial(portforward.PortForwardProtocolV1Name)
			require.NoError(t, err)
			defer conn.Close()
			open := func(port, id string) (data, errs streamhttp.Stream, dataErr error) {
				h := http.Header{}
				h.Set("port", port)
				h.Set("requestID", id)
				h.Set("streamType", "error")
				errs, err := conn.CreateStream(h)
				require.NoError(t, err)
				require.NoError(t, errs.Close()) // the client sends nothing on it
				h.Set("streamType", "data")
				data, dataErr = conn.CreateStream(h)
				return data, errs, dataErr
			}
			good, _, err := open("8080", "0")
			require.NoError(t, err)
			// The server may reset the refused port's data stream before the client has
			// finished creating it: only its error stream matters here.
			_, bad, _ := open("1", "1")
			msg, err := io.ReadAll(bad)
			require.NoError(t, err)
			require.Contains(t, string(msg), "connection refused")
			_, err = good.Write([]byte("still here\n"))
			require.NoError(t, err)
			want := "port 8080\nstill here\n"
			got := make([]byte, len(want))
			_, err = io.ReadFull(good, got)
			require.NoError(t, err)
			require.Equal(t, want, string(got))
		})
	}
}

func pfDialer(t *testing.T, proto, u string) streamhttp.Dialer {
	t.Helper()
	parsed, err := url.Parse(u)
	require.NoError(t, err)
	cfg := &rest.Config{TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
	if proto == "websocket" {
		d, err := portforward.NewSPDYOverWebsocketDialerForStreaming(parsed, cfg)
		require.NoError(t, err)
		return d
	}
	tr, upgrader, err := spdy.RoundTripperFor(cfg)
	require.NoError(t, err)
	return spdy.NewDialerForStreaming(upgrader, &http.Client{Transport: tr}, "POST", parsed)
}

// forward starts a client-go port forwarder to a remote port and returns the local port.
func forward(t *testing.T, proto, u, remote string) uint16 {
	t.Helper()
	stop, ready := make(chan struct{}), make(chan struct{})
	pf, err := portforward.NewOnAddressesForStreaming(pfDialer(t, proto, u), []string{"127.0.0.1"}, []string{"0:" + remote}, stop, ready, io.Discard, io.Discard)
	require.NoError(t, err)
	errc := make(chan error, 1)
	go func() { errc <- pf.ForwardPorts() }()
	t.Cleanup(func() { close(stop); <-errc })
	select {
	case <-ready:
	case err := <-errc:
		t.Fatalf("port forward: %v", err)
	}
	got, err := pf.GetPorts()
	require.NoError(t, err)
	return got[0].Local
}
