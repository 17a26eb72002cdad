package streaming

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"os"
	"sync"
)

// After an upgrade net/http no longer watches a connection, so a request's context
// does not end when its client goes away, and neither does an exec started for it.
// The tracked connections below end it: a read that fails for any reason but a
// deadline (the client closed or reset the connection), or a Close, cancels the
// connection's context, which every request on it derives from (connContext).

// trackedListener remembers its open connections so that Stop can close the
// upgraded ones, which http.Server.Close leaves alone.
type trackedListener struct {
	net.Listener
	mu     sync.Mutex
	conns  map[*trackedConn]struct{}
	closed bool
}

func newTrackedListener(l net.Listener) *trackedListener {
	return &trackedListener{Listener: l, conns: map[*trackedConn]struct{}{}}
}

func (l *trackedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	tc := &trackedConn{Conn: c, l: l, ctx: ctx, cancel: cancel}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		tc.cancel()
		c.Close()
		return nil, net.ErrClosed
	}
	l.conns[tc] = struct{}{}
	return tc, nil
}

// closeAll closes every open connection and refuses new ones.
func (l *trackedListener) closeAll() {
	l.mu.Lock()
	l.closed = true
	conns := make([]*trackedConn, 0, len(l.conns))
	for c := range l.conns {
		conns = append(conns, c)
	}
	l.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

// open is the number of connections not closed yet.
func (l *trackedListener) open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns)
}

type trackedConn struct {
	net.Conn
	l      *trackedListener
	ctx    context.Context
	cancel context.CancelFunc
	once   sync.Once
}

func (c *trackedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		c.cancel() // the client is gone
	}
	return n, err
}

func (c *trackedConn) Close() error {
	c.cancel()
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.conns, c)
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}

// connContext makes a connection's context end with the tracked connection.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if t, ok := c.(*tls.Conn); ok {
		c = t.NetConn()
	}
	tc, ok := c.(*trackedConn)
	if !ok {
		return ctx
	}
	ctx, cancel := context.WithCancel(ctx)
	context.AfterFunc(tc.ctx, cancel) // tc.ctx ends at the latest when the connection is closed
	return ctx
}
