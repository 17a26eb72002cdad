package main

import (
	"bytes"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	o, err := parse([]string{"-v", "-t", "-w", "2", "endpoint-test2", "80"})
	if err != nil || !o.verbose || o.udp || o.wait != 2*time.Second || o.host != "endpoint-test2" || o.port != "80" {
		t.Fatalf("parse tcp: %+v, %v", o, err)
	}
	o, err = parse([]string{"-vz", "10.0.0.1", "8080", "-w", "5"})
	if err != nil || !o.verbose || !o.zero || o.wait != 5*time.Second || o.host != "10.0.0.1" {
		t.Fatalf("parse -vz with -w after the address: %+v, %v", o, err)
	}
	o, err = parse([]string{"-w", "1", "-W", "1", "-u", "-p", "5000", "h", "53"})
	if err != nil || !o.udp || o.packets != 1 || o.srcPort != 5000 {
		t.Fatalf("parse udp: %+v, %v", o, err)
	}
	for _, bad := range [][]string{{"h"}, {"-l", "-p", "80"}, {"-w"}, {"-w", "x", "h", "1"}} {
		if _, err := parse(bad); err == nil {
			t.Errorf("parse(%q): no error", bad)
		}
	}
}

// TestTCP: stdin goes out, the reply comes back on stdout, and the end comes
// when the peer closes.
func TestTCP(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		line := make([]byte, 9)
		n, _ := c.Read(line)
		c.Write([]byte("got " + string(line[:n])))
		c.Close()
	}()
	host, port, _ := net.SplitHostPort(l.Addr().String())
	var out, errb bytes.Buffer
	if rc := run([]string{"-v", "-t", "-w", "2", host, port}, strings.NewReader("hostName\n"), &out, &errb); rc != 0 {
		t.Fatalf("rc %d: %s", rc, errb.String())
	}
	if out.String() != "got hostName\n" || !strings.Contains(errb.String(), "succeeded") {
		t.Fatalf("stdout %q, stderr %q", out.String(), errb.String())
	}
	l.Close()
	if rc := run([]string{"-w", "1", host, port}, strings.NewReader(""), &out, &errb); rc != 1 {
		t.Fatalf("connect to a closed port: rc %d", rc)
	}
}

// TestUDP: one datagram out, the reply back, the end after -W 1 packet.
func TestUDP(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	go func() {
		buf := make([]byte, 100)
		n, addr, err := pc.ReadFrom(buf)
		if err == nil {
			pc.WriteTo([]byte("echo "+string(buf[:n])), addr)
		}
	}()
	port := strconv.Itoa(pc.LocalAddr().(*net.UDPAddr).Port)
	var out, errb bytes.Buffer
	if rc := run([]string{"-u", "-w", "5", "-W", "1", "127.0.0.1", port}, strings.NewReader("hostName\n"), &out, &errb); rc != 0 {
		t.Fatalf("rc %d: %s", rc, errb.String())
	}
	if out.String() != "echo hostName\n" {
		t.Fatalf("stdout %q", out.String())
	}
}
