// Command curl is the offline stand-in for curl in the agnhost image
// (upstream's is Alpine's curl): the subset of curl's command line that
// Kubernetes' e2e tests use on pods, GET only.
//
//	curl [-g] [-q] [-s] [-S] [-f] [-i] [-L] [-o FILE] [-w '%{http_code}']
//	     [--max-time N] [-m N] [--connect-timeout N] [--interface IP|NAME] URL
//
// The body goes to stdout (or FILE); with -w, the status code follows. Exit
// codes are curl's: 0, 3 (bad URL), 6 (cannot resolve), 7 (cannot connect),
// 22 (-f and a status >= 400), 28 (timeout), 45 (no such --interface), 2
// (unknown option).
//
// It is built static by critest/images/cmd/mkimages; nothing imports it.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

type options struct {
	url            string
	out            string
	writeOut       string
	fail, headers  bool
	follow         bool
	maxTime        time.Duration
	connectTimeout time.Duration
	// iface is --interface: the source address (an IP, or an interface's
	// first address).
	iface string
}

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func parse(args []string) (options, error) {
	var o options
	o.connectTimeout = 2 * time.Minute
	seconds := func(s string) (time.Duration, error) {
		f, err := strconv.ParseFloat(s, 64)
		return time.Duration(f * float64(time.Second)), err
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		next := func() (string, error) {
			if i+1 >= len(args) {
				return "", fmt.Errorf("option %s: requires parameter", a)
			}
			i++
			return args[i], nil
		}
		var err error
		switch a {
		case "-g", "--globoff", "-q", "--disable", "-s", "--silent", "-S", "--show-error", "-v", "--verbose":
		case "-f", "--fail":
			o.fail = true
		case "-i", "--include":
			o.headers = true
		case "-L", "--location":
			o.follow = true
		case "-o", "--output":
			o.out, err = next()
		case "-w", "--write-out":
			o.writeOut, err = next()
		case "-m", "--max-time":
			var s string
			if s, err = next(); err == nil {
				o.maxTime, err = seconds(s)
			}
		case "--interface":
			o.iface, err = next()
		case "--connect-timeout":
			var s string
			if s, err = next(); err == nil {
				o.connectTimeout, err = seconds(s)
			}
		default:
			if strings.HasPrefix(a, "-") {
				return o, fmt.Errorf("option %s: is unknown", a)
			}
			o.url = a
		}
		if err != nil {
			return o, err
		}
	}
	if o.url == "" {
		return o, errors.New("no URL specified")
	}
	if !strings.Contains(o.url, "://") {
		o.url = "http://" + o.url
	}
	return o, nil
}

func run(args []string, stdout, stderr io.Writer) int {
	o, err := parse(args)
	if err != nil {
		fmt.Fprintf(stderr, "curl: %v\n", err)
		return 2
	}
	ctx := context.Background()
	if o.maxTime > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.maxTime)
		defer cancel()
	}
	dialer := &net.Dialer{Timeout: o.connectTimeout}
	if o.iface != "" {
		ip, err := sourceIP(o.iface)
		if err != nil {
			fmt.Fprintf(stderr, "curl: (45) bind failed: %v\n", err)
			return 45
		}
		dialer.LocalAddr = &net.TCPAddr{IP: ip}
	}
	client := &http.Client{Transport: &http.Transport{
		Proxy:       nil,
		DialContext: dialer.DialContext,
	}}
	if !o.follow {
		client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, o.url, nil)
	if err != nil {
		fmt.Fprintf(stderr, "curl: (3) %v\n", err)
		return 3
	}
	req.Header.Set("User-Agent", "curl/8 (shimd stand-in)")
	resp, err := client.Do(req)
	if err != nil {
		code := exitCode(err)
		fmt.Fprintf(stderr, "curl: (%d) %v\n", code, err)
		return code
	}
	defer resp.Body.Close()
	if o.fail && resp.StatusCode >= 400 {
		fmt.Fprintf(stderr, "curl: (22) The requested URL returned error: %d\n", resp.StatusCode)
		return 22
	}
	var w io.Writer = stdout
	if o.out != "" {
		f, err := os.Create(o.out)
		if err != nil {
			fmt.Fprintf(stderr, "curl: (23) %v\n", err)
			return 23
		}
		defer f.Close()
		w = f
	}
	if o.headers {
		fmt.Fprintf(w, "%s %s\r\n", resp.Proto, resp.Status)
		_ = resp.Header.Write(w)
		fmt.Fprint(w, "\r\n")
	}
	if _, err := io.Copy(w, resp.Body); err != nil {
		code := exitCode(err)
		fmt.Fprintf(stderr, "curl: (%d) %v\n", code, err)
		return code
	}
	if o.writeOut != "" {
		fmt.Fprint(stdout, strings.ReplaceAll(o.writeOut, "%{http_code}", fmt.Sprintf("%03d", resp.StatusCode)))
	}
	return 0
}

// exitCode maps a request error to curl's exit code.
func exitCode(err error) int {
	var dnsErr *net.DNSError
	var netErr net.Error
	switch {
	case errors.As(err, &dnsErr):
		return 6
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return 28
	default:
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			return 7
		}
		return 56
	}
}

// sourceIP is the address --interface names: an IP, or the first address of
// the interface of that name.
func sourceIP(iface string) (net.IP, error) {
	if ip := net.ParseIP(iface); ip != nil {
		return ip, nil
	}
	ifi, err := net.InterfaceByName(iface)
	if err != nil {
		return nil, err
	}
	addrs, err := ifi.Addrs()
	if err != nil {
		return nil, err
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			return n.IP, nil
		}
	}
	return nil, fmt.Errorf("interface %s has no address", iface)
}
