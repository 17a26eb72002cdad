// Command nc is the offline stand-in for OpenBSD's netcat in the agnhost image
// (upstream's is Alpine's netcat-openbsd; busybox's nc knows none of its
// flags): the client subset Kubernetes' e2e tests run in agnhost pods.
//
//	nc [-v] [-t|-u] [-z] [-w SECS] [-W PACKETS] [-p SRCPORT] HOST PORT
//
// Flags may stand anywhere and be combined (-vz). It connects (TCP, or UDP
// with -u), sends what it reads from stdin (UDP: one datagram per read) and
// copies what comes back to stdout until the peer closes, -w seconds pass
// without data (also the connect timeout), or -W packets were received. -z
// only connects. -v reports the connection on stderr. Exit 1 when the
// connection or a read fails, 2 on a bad command line.
//
// It is built static by critest/images/cmd/mkimages; nothing imports it.
package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"time"
)

type options struct {
	verbose, udp, zero bool
	wait               time.Duration
	packets            int
	srcPort            int
	host, port         string
}

func main() { os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) }

func parse(args []string) (options, error) {
	var o options
	var pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if len(a) < 2 || a[0] != '-' {
			pos = append(pos, a)
			continue
		}
		for j := 1; j < len(a); j++ {
			switch c := a[j]; c {
			case 'v':
				o.verbose = true
			case 't':
				o.udp = false
			case 'u':
				o.udp = true
			case 'z':
				o.zero = true
			case 'w', 'W', 'p':
				v := a[j+1:]
				if v == "" {
					if i+1 >= len(args) {
						return o, fmt.Errorf("option -%c needs a value", c)
					}
					i++
					v = args[i]
				}
				n, err := strconv.Atoi(v)
				if err != nil || n < 0 {
					return o, fmt.Errorf("option -%c: %q is not a number", c, v)
				}
				switch c {
				case 'w':
					o.wait = time.Duration(n) * time.Second
				case 'W':
					o.packets = n
				case 'p':
					o.srcPort = n
				}
				j = len(a)
			default:
				return o, fmt.Errorf("unsupported option -%c", c)
			}
		}
	}
	if len(pos) != 2 {
		return o, errors.New("usage: nc [-v] [-t|-u] [-z] [-w SECS] [-W PACKETS] [-p SRCPORT] HOST PORT")
	}
	o.host, o.port = pos[0], pos[1]
	return o, nil
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	o, err := parse(args)
	if err != nil {
		fmt.Fprintf(stderr, "nc: %v\n", err)
		return 2
	}
	network := "tcp"
	if o.udp {
		network = "udp"
	}
	d := net.Dialer{Timeout: o.wait}
	if o.srcPort > 0 {
		if o.udp {
			d.LocalAddr = &net.UDPAddr{Port: o.srcPort}
		} else {
			d.LocalAddr = &net.TCPAddr{Port: o.srcPort}
		}
	}
	conn, err := d.Dial(network, net.JoinHostPort(o.host, o.port))
	if err != nil {
		fmt.Fprintf(stderr, "nc: connect to %s port %s (%s) failed: %v\n", o.host, o.port, network, err)
		return 1
	}
	defer conn.Close()
	if o.verbose {
		fmt.Fprintf(stderr, "Connection to %s %s port [%s/*] succeeded!\n", o.host, o.port, network)
	}
	if o.zero {
		return 0
	}
	go send(conn, stdin)
	return receive(conn, o, stdout, stderr)
}

// send copies stdin to the connection; on UDP every read is one datagram.
// As OpenBSD's nc without -N, the end of stdin does not shut the connection.
func send(conn net.Conn, stdin io.Reader) {
	buf := make([]byte, 65536)
	for {
		n, err := stdin.Read(buf)
		if n > 0 {
			if _, werr := conn.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// receive copies what comes back to stdout until the peer closes, o.wait
// passes without data or o.packets reads were made.
func receive(conn net.Conn, o options, stdout, stderr io.Writer) int {
	buf := make([]byte, 65536)
	for got := 0; o.packets == 0 || got < o.packets; got++ {
		if o.wait > 0 {
			_ = conn.SetReadDeadline(time.Now().Add(o.wait))
		}
		n, err := conn.Read(buf)
		if n > 0 {
			_, _ = stdout.Write(buf[:n])
		}
		var ne net.Error
		switch {
		case err == nil:
		case errors.Is(err, io.EOF), errors.As(err, &ne) && ne.Timeout():
			return 0
		default:
			fmt.Fprintf(stderr, "nc: %v\n", err)
			return 1
		}
	}
	return 0
}
