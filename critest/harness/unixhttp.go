package harness

import (
	"context"
	"net"
	"net/http"
	"time"
)

// UnixHTTPClient talks HTTP over the unix socket sock (shimd's metrics and debug
// endpoints), whatever host a URL names; timeout 0 is none. It keeps no idle
// connection, so it holds nothing in shimd between requests.
func UnixHTTPClient(sock string, timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
	}}
}
