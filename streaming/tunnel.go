package streaming

import (
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"k8s.io/cri-streaming/pkg/streaming/portforward"
	"k8s.io/streaming/pkg/httpstream/wsstream"
)

// Port forwarding over WebSocket: client-go (kubectl, crictl, critest) tunnels the
// SPDY port-forward protocol in binary WebSocket messages, subprotocol
// "SPDY/3.1+portforward.k8s.io". The library speaks the SPDY side over the tunnel.

const tunnelProtocol = portforward.WebsocketsSPDYTunnelingPortForwardV1

func isTunnelRequest(r *http.Request) bool {
	return hasPathPrefix(r, "/portforward/") && wsstream.IsWebSocketRequestWithTunnelingProtocol(r)
}

func (s *Server) serveTunnel(w http.ResponseWriter, r *http.Request) {
	uw := newUpgradeWriter(w, func() (net.Conn, error) {
		up := websocket.Upgrader{Subprotocols: []string{tunnelProtocol}, HandshakeTimeout: 30 * time.Second}
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			return nil, err
		}
		if ws.Subprotocol() != tunnelProtocol {
			ws.Close()
			return nil, errors.New("websocket: client does not tunnel " + portforward.ProtocolV1Name)
		}
		return &tunnelConn{ws: ws}, nil
	})
	s.lib.ServeHTTP(uw, spdyRequest(r, portforward.ProtocolV1Name))
}

// tunnelConn is a net.Conn whose bytes travel in binary WebSocket messages.
type tunnelConn struct {
	ws        *websocket.Conn
	r         io.Reader // the message being read
	wmu       sync.Mutex
	closeOnce sync.Once
}

func (c *tunnelConn) Read(p []byte) (int, error) {
	for {
		if c.r == nil {
			typ, r, err := c.ws.NextReader()
			if err != nil {
				if websocket.IsCloseError(err, websocket.CloseNormalClosure) {
					return 0, io.EOF
				}
				return 0, err
			}
			if typ != websocket.BinaryMessage {
				continue
			}
			c.r = r
		}
		n, err := c.r.Read(p)
		if errors.Is(err, io.EOF) {
			c.r = nil
			if n == 0 {
				continue
			}
			err = nil
		}
		return n, err
	}
}

func (c *tunnelConn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.ws.WriteMessage(websocket.BinaryMessage, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (c *tunnelConn) Close() error {
	err := net.ErrClosed
	c.closeOnce.Do(func() {
		msg := websocket.FormatCloseMessage(websocket.CloseNormalClosure, "")
		_ = c.ws.WriteControl(websocket.CloseMessage, msg, time.Now().Add(time.Second))
		err = c.ws.Close()
	})
	return err
}

func (c *tunnelConn) LocalAddr() net.Addr                { return c.ws.LocalAddr() }
func (c *tunnelConn) RemoteAddr() net.Addr               { return c.ws.RemoteAddr() }
func (c *tunnelConn) SetDeadline(t time.Time) error      { return c.ws.NetConn().SetDeadline(t) }
func (c *tunnelConn) SetReadDeadline(t time.Time) error  { return c.ws.SetReadDeadline(t) }
func (c *tunnelConn) SetWriteDeadline(t time.Time) error { return c.ws.SetWriteDeadline(t) }
