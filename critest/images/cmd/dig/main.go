// Command dig is the offline stand-in for dig and getent in the agnhost and
// glibc-dns-testing images (upstream's are bind's dig and glibc's getent):
// the subset of their command lines that Kubernetes' e2e DNS tests run.
//
//	dig [+tcp|+notcp] [+noall] [+answer] [+search] [+short] NAME [A|AAAA|CNAME|SRV|PTR|TXT]
//	getent hosts NAME
//
// dig asks the first nameserver of /etc/resolv.conf (UDP, or TCP with +tcp)
// and prints the answer section as dig does ("name. TTL IN TYPE data"), or
// with +short the data only. +search tries the search domains of
// resolv.conf, as dig does, when NAME has fewer dots than ndots. getent hosts
// resolves through /etc/hosts, then DNS (Go's resolver) and prints
// "ADDRESS NAME"; exit 2 when NAME is unknown. The program is installed
// under both names and picks by the name it is called by.
//
// It is built static by critest/images/cmd/mkimages; nothing imports it.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

func main() {
	if filepath.Base(os.Args[0]) == "getent" {
		os.Exit(getent(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(dig(os.Args[1:], os.Stdout, os.Stderr))
}

func getent(args []string, stdout, stderr io.Writer) int {
	if len(args) != 2 || args[0] != "hosts" {
		fmt.Fprintln(stderr, "usage: getent hosts NAME")
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupHost(ctx, args[1])
	if err != nil || len(addrs) == 0 {
		return 2
	}
	for _, a := range addrs {
		fmt.Fprintf(stdout, "%-15s %s\n", a, args[1])
	}
	return 0
}

type query struct {
	name           string
	qtype          dnsmessage.Type
	tcp, short     bool
	search, answer bool
}

var types = map[string]dnsmessage.Type{"A": dnsmessage.TypeA, "AAAA": dnsmessage.TypeAAAA, "CNAME": dnsmessage.TypeCNAME,
	"SRV": dnsmessage.TypeSRV, "PTR": dnsmessage.TypePTR, "TXT": dnsmessage.TypeTXT}

func parseDig(args []string) (query, error) {
	q := query{qtype: dnsmessage.TypeA, answer: true}
	for _, a := range args {
		switch {
		case a == "+tcp" || a == "+vc":
			q.tcp = true
		case a == "+notcp" || a == "+novc":
			q.tcp = false
		case a == "+noall":
			q.answer = false
		case a == "+answer":
			q.answer = true
		case a == "+search":
			q.search = true
		case a == "+nosearch":
			q.search = false
		case a == "+short":
			q.short = true
		case strings.HasPrefix(a, "+"):
			return q, fmt.Errorf("unsupported option %s", a)
		case types[strings.ToUpper(a)] != 0 && q.name != "":
			q.qtype = types[strings.ToUpper(a)]
		case q.name == "":
			q.name = a
		default:
			return q, fmt.Errorf("unexpected argument %q", a)
		}
	}
	if q.name == "" {
		return q, errors.New("no name to look up")
	}
	return q, nil
}

func dig(args []string, stdout, stderr io.Writer) int {
	q, err := parseDig(args)
	if err != nil {
		fmt.Fprintf(stderr, "dig: %v\n", err)
		return 1
	}
	conf, err := readResolvConf("/etc/resolv.conf")
	if err != nil || len(conf.servers) == 0 {
		fmt.Fprintf(stderr, "dig: no nameserver in /etc/resolv.conf: %v\n", err)
		return 10
	}
	names := []string{q.name}
	if q.search {
		names = conf.candidates(q.name)
	}
	var last []dnsmessage.Resource
	for _, n := range names {
		ans, rcode, err := exchange(conf.servers[0], n, q.qtype, q.tcp)
		if err != nil {
			fmt.Fprintf(stderr, ";; communications error: %v\n", err)
			return 9
		}
		last = ans
		if rcode == dnsmessage.RCodeSuccess && len(ans) > 0 {
			break
		}
	}
	for _, r := range last {
		data := rdata(r)
		if q.short {
			fmt.Fprintln(stdout, data)
		} else if q.answer {
			fmt.Fprintf(stdout, "%s\t%d\tIN\t%s\t%s\n", r.Header.Name, r.Header.TTL, strings.TrimPrefix(r.Header.Type.String(), "Type"), data)
		}
	}
	return 0
}

func rdata(r dnsmessage.Resource) string {
	switch b := r.Body.(type) {
	case *dnsmessage.AResource:
		return net.IP(b.A[:]).String()
	case *dnsmessage.AAAAResource:
		return net.IP(b.AAAA[:]).String()
	case *dnsmessage.CNAMEResource:
		return b.CNAME.String()
	case *dnsmessage.PTRResource:
		return b.PTR.String()
	case *dnsmessage.SRVResource:
		return fmt.Sprintf("%d %d %d %s", b.Priority, b.Weight, b.Port, b.Target.String())
	case *dnsmessage.TXTResource:
		return `"` + strings.Join(b.TXT, `" "`) + `"`
	}
	return r.Body.GoString()
}

// exchange sends one query to server (host:53) and returns the answer section.
func exchange(server, name string, qtype dnsmessage.Type, tcp bool) ([]dnsmessage.Resource, dnsmessage.RCode, error) {
	fqdn, err := dnsmessage.NewName(strings.TrimSuffix(name, ".") + ".")
	if err != nil {
		return nil, 0, err
	}
	id := uint16(time.Now().UnixNano())
	msg := dnsmessage.Message{Header: dnsmessage.Header{ID: id, RecursionDesired: true},
		Questions: []dnsmessage.Question{{Name: fqdn, Type: qtype, Class: dnsmessage.ClassINET}}}
	packed, err := msg.Pack()
	if err != nil {
		return nil, 0, err
	}
	network := "udp"
	if tcp {
		network = "tcp"
	}
	conn, err := net.DialTimeout(network, server, 5*time.Second)
	if err != nil {
		return nil, 0, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 65536)
	var resp []byte
	if tcp {
		if _, err := conn.Write(append([]byte{byte(len(packed) >> 8), byte(len(packed))}, packed...)); err != nil {
			return nil, 0, err
		}
		if _, err := io.ReadFull(conn, buf[:2]); err != nil {
			return nil, 0, err
		}
		n := int(buf[0])<<8 | int(buf[1])
		if _, err := io.ReadFull(conn, buf[:n]); err != nil {
			return nil, 0, err
		}
		resp = buf[:n]
	} else {
		if _, err := conn.Write(packed); err != nil {
			return nil, 0, err
		}
		n, err := conn.Read(buf)
		if err != nil {
			return nil, 0, err
		}
		resp = buf[:n]
	}
	var m dnsmessage.Message
	if err := m.Unpack(resp); err != nil {
		return nil, 0, err
	}
	if m.Header.ID != id {
		return nil, 0, fmt.Errorf("reply id %d, want %d", m.Header.ID, id)
	}
	return m.Answers, m.Header.RCode, nil
}

type resolvConf struct {
	servers []string
	search  []string
	ndots   int
}

func readResolvConf(path string) (resolvConf, error) {
	c := resolvConf{ndots: 1}
	b, err := os.ReadFile(path)
	if err != nil {
		return c, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "nameserver":
			c.servers = append(c.servers, net.JoinHostPort(f[1], "53"))
		case "search":
			c.search = f[1:]
		case "options":
			for _, o := range f[1:] {
				var n int
				if _, err := fmt.Sscanf(o, "ndots:%d", &n); err == nil {
					c.ndots = n
				}
			}
		}
	}
	return c, nil
}

// candidates are the names dig +search tries, in order: with fewer dots than
// ndots the search domains first, then the name itself; otherwise the name
// first. A name ending in a dot is tried as it is only.
func (c resolvConf) candidates(name string) []string {
	if strings.HasSuffix(name, ".") {
		return []string{name}
	}
	var withSearch []string
	for _, s := range c.search {
		withSearch = append(withSearch, name+"."+s)
	}
	if strings.Count(name, ".") < c.ndots {
		return append(withSearch, name)
	}
	return append([]string{name}, withSearch...)
}
