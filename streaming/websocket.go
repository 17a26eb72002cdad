package streaming

import (
	"io"
	"net"
	"net/http"
	"strings"
	"sync"

	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	"k8s.io/streaming/pkg/httpstream"
	"k8s.io/streaming/pkg/httpstream/spdy"
	"k8s.io/streaming/pkg/httpstream/wsstream"
)

// WebSocket "v5.channel.k8s.io" for exec and attach. The client's channels are
// bridged to a SPDY "v4.channel.k8s.io" session with the library over an in-memory
// pipe, as the API server bridges them to a kubelet. v5 is v4 plus a CLOSE signal
// (which ends a channel's input, e.g. stdin): the status JSON on the error channel
// and the resize JSON are the same, so they are copied as they are.

// Channel numbers of the remote command WebSocket protocols.
const (
	chStdin = iota
	chStdout
	chStderr
	chError
	chResize
)

func isV5Request(r *http.Request) bool {
	if !wsstream.IsWebSocketRequest(r) || !hasPathPrefix(r, "/exec/", "/attach/") {
		return false
	}
	for _, p := range strings.Split(r.Header.Get("Sec-WebSocket-Protocol"), ",") {
		if strings.TrimSpace(p) == remotecommand.StreamProtocolV5Name {
			return true
		}
	}
	return false
}

func (s *Server) serveV5(w http.ResponseWriter, r *http.Request) {
	opts, ok := s.ws.take(tokenOf(r.URL.Path))
	if !ok {
		http.NotFound(w, r)
		return
	}
	var (
		ws      *wsstream.Conn
		bridged = make(chan struct{})
	)
	uw := newUpgradeWriter(w, func() (net.Conn, error) {
		conn := wsstream.NewConn(map[string]wsstream.ChannelProtocolConfig{
			remotecommand.StreamProtocolV5Name: {Binary: true, Channels: v5Channels(opts)},
		})
		_, streams, err := conn.Open(w, r)
		if err != nil {
			return nil, err
		}
		ws = conn
		// Tell the client the session is up: an empty frame on the first writable channel.
		switch {
		case opts.stdout:
			_, _ = streams[chStdout].Write(nil)
		case opts.stderr:
			_, _ = streams[chStderr].Write(nil)
		default:
			_, _ = streams[chError].Write(nil)
		}
		lib, ours := net.Pipe()
		go func() {
			defer close(bridged)
			bridgeV5(ours, streams, opts)
		}()
		return lib, nil
	})
	s.lib.ServeHTTP(uw, spdyRequest(r, remotecommand.StreamProtocolV4Name))
	if ws != nil {
		<-bridged // all output and the status are on the WebSocket
		ws.Close()
	}
}

func v5Channels(o streamOptions) []wsstream.ChannelType {
	ch := func(on bool, t wsstream.ChannelType) wsstream.ChannelType {
		if on {
			return t
		}
		return wsstream.IgnoreChannel
	}
	return []wsstream.ChannelType{
		chStdin:  ch(o.stdin, wsstream.ReadChannel),
		chStdout: ch(o.stdout, wsstream.WriteChannel),
		chStderr: ch(o.stderr && !o.tty, wsstream.WriteChannel),
		chError:  wsstream.WriteChannel,
		chResize: ch(o.tty, wsstream.ReadChannel),
	}
}

// bridgeV5 is the SPDY client side of the session: it opens the streams the library
// expects for opts and copies between them and the WebSocket channels until the
// library closes the session.
func bridgeV5(c net.Conn, ws []io.ReadWriteCloser, opts streamOptions) {
	conn, err := spdy.NewClientConnection(c)
	if err != nil {
		c.Close()
		return
	}
	defer conn.Close()
	create := func(kind string) httpstream.Stream {
		h := http.Header{}
		h.Set(remotecommand.StreamType, kind)
		st, err := conn.CreateStream(h)
		if err != nil {
			return nil
		}
		return st
	}
	var out sync.WaitGroup
	toClient := func(dst io.Writer, src httpstream.Stream) {
		out.Add(1)
		go func() {
			defer out.Done()
			_, _ = io.Copy(dst, src)
		}()
	}
	// Input copies end when the client closes the channel or the WebSocket closes.
	toLibrary := func(dst httpstream.Stream, src io.Reader) {
		go func() {
			_, _ = io.Copy(dst, src)
			dst.Close()
		}()
	}
	errStream := create(remotecommand.StreamTypeError)
	if errStream == nil {
		return
	}
	toClient(ws[chError], errStream)
	for _, st := range []struct {
		on      bool
		kind    string
		ch      int
		toInput bool
	}{
		{opts.stdin, remotecommand.StreamTypeStdin, chStdin, true},
		{opts.stdout, remotecommand.StreamTypeStdout, chStdout, false},
		{opts.stderr && !opts.tty, remotecommand.StreamTypeStderr, chStderr, false},
		{opts.tty, remotecommand.StreamTypeResize, chResize, true},
	} {
		if !st.on {
			continue
		}
		stream := create(st.kind)
		if stream == nil {
			break
		}
		if st.toInput {
			toLibrary(stream, ws[st.ch])
		} else {
			toClient(ws[st.ch], stream)
		}
	}
	out.Wait()
}
