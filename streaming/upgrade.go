package streaming

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"k8s.io/streaming/pkg/httpstream"
	"k8s.io/streaming/pkg/httpstream/spdy"
)

// The translators hand the library a SPDY upgrade request and an upgradeWriter. The
// library checks and consumes the token as usual: an unknown or used token gets its
// 404, written through to the client. When it accepts, it answers 101 and hijacks the
// connection; the upgradeWriter then upgrades the client's request to WebSocket
// instead and gives the library a connection that carries SPDY frames (the tunnel,
// or an in-memory pipe to a translator).

// upgradeWriter is the http.ResponseWriter the library sees for a translated request.
type upgradeWriter struct {
	w      http.ResponseWriter
	header http.Header
	// hijack upgrades the client's request and returns the connection the library
	// speaks SPDY over.
	hijack    func() (net.Conn, error)
	upgrading bool
	wrote     bool
}

func newUpgradeWriter(w http.ResponseWriter, hijack func() (net.Conn, error)) *upgradeWriter {
	return &upgradeWriter{w: w, header: http.Header{}, hijack: hijack}
}

func (u *upgradeWriter) Header() http.Header { return u.header }

func (u *upgradeWriter) WriteHeader(code int) {
	if u.wrote || u.upgrading {
		return
	}
	if code == http.StatusSwitchingProtocols {
		u.upgrading = true // the WebSocket upgrade answers instead
		return
	}
	u.wrote = true
	for k, v := range u.header {
		u.w.Header()[k] = v
	}
	u.w.WriteHeader(code)
}

func (u *upgradeWriter) Write(p []byte) (int, error) {
	if u.upgrading {
		return 0, errors.New("write after upgrade")
	}
	u.WriteHeader(http.StatusOK)
	return u.w.Write(p)
}

func (u *upgradeWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if !u.upgrading {
		return nil, nil, errors.New("hijack without upgrade")
	}
	c, err := u.hijack()
	if err != nil {
		return nil, nil, err
	}
	return c, bufio.NewReadWriter(bufio.NewReader(c), bufio.NewWriter(c)), nil
}

// spdyRequest is r as a SPDY upgrade request for protocol, as the library expects.
func spdyRequest(r *http.Request, protocol string) *http.Request {
	r2 := r.Clone(r.Context())
	for k := range r2.Header {
		if strings.HasPrefix(strings.ToLower(k), "sec-websocket-") {
			delete(r2.Header, k)
		}
	}
	r2.Header.Set(httpstream.HeaderConnection, httpstream.HeaderUpgrade)
	r2.Header.Set(httpstream.HeaderUpgrade, spdy.HeaderSpdy31)
	r2.Header.Set(httpstream.HeaderProtocolVersion, protocol)
	return r2
}

// streamOptions are the streams an exec or attach asked for.
type streamOptions struct{ stdin, stdout, stderr, tty bool }

// wsOptionsTTL outlives the library's token expiry (one minute).
const wsOptionsTTL = 2 * time.Minute

// wsOptions remembers the stream options of each handed-out token: a WebSocket
// client's streams are set up before the library hands them to the backend. The
// library still decides whether a token is valid.
type wsOptions struct {
	mu sync.Mutex
	m  map[string]wsEntry
}

type wsEntry struct {
	opts    streamOptions
	expires time.Time
}

func newWSOptions() *wsOptions { return &wsOptions{m: map[string]wsEntry{}} }

func (o *wsOptions) put(token string, opts streamOptions) {
	now := time.Now()
	o.mu.Lock()
	defer o.mu.Unlock()
	for t, e := range o.m {
		if now.After(e.expires) {
			delete(o.m, t)
		}
	}
	o.m[token] = wsEntry{opts: opts, expires: now.Add(wsOptionsTTL)}
}

// take returns and forgets the options of token.
func (o *wsOptions) take(token string) (streamOptions, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	e, ok := o.m[token]
	delete(o.m, token)
	return e.opts, ok && time.Now().Before(e.expires)
}

func (o *wsOptions) len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.m)
}
