package network

import (
	"fmt"
	"io"
	"net"
	"strconv"
	"time"
)

// portForwardLinger is how long a forwarded connection waits for the pod's side once
// the client has finished sending (half-close), before it is cut.
const portForwardLinger = 10 * time.Second

// Forward copies between conn and stream both ways until either side is done, then
// closes conn. The client's EOF reaches the pod as a half-close where conn has one.
func Forward(conn net.Conn, stream io.ReadWriteCloser) (copyErr error) {
	defer conn.Close()
	toPod, toClient := make(chan error, 1), make(chan error, 1)
	go func() {
		_, err := io.Copy(conn, stream)
		if hc, ok := conn.(interface{ CloseWrite() error }); ok {
			_ = hc.CloseWrite() // the pod sees the client's EOF
		}
		toPod <- err
	}()
	go func() {
		_, err := io.Copy(stream, conn)
		toClient <- err
	}()
	select {
	case copyErr = <-toClient:
	case copyErr = <-toPod:
		select {
		case copyErr = <-toClient:
		case <-time.After(portForwardLinger):
		}
	}
	return copyErr
}

// DialPod connects to port on the pod's loopback, IPv4 then IPv6, from a thread inside
// its network namespace (the host's when netnsPath is empty): the socket stays in that
// namespace.
func DialPod(netnsPath string, port int32) (net.Conn, error) {
	var conn net.Conn
	dial := func() error {
		d := net.Dialer{Timeout: 10 * time.Second}
		p := strconv.Itoa(int(port))
		c, err := d.Dial("tcp4", net.JoinHostPort("127.0.0.1", p))
		if err != nil {
			c6, err6 := d.Dial("tcp6", net.JoinHostPort("::1", p))
			if err6 != nil {
				return fmt.Errorf("connect to port %d in the pod: %v (IPv6: %v)", port, err, err6)
			}
			c = c6
		}
		conn = c
		return nil
	}
	var err error
	if netnsPath == "" {
		err = dial()
	} else {
		err = InNetNS(netnsPath, dial)
	}
	return conn, err
}
