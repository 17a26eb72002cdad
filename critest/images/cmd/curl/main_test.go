package main

import (
	"bytes"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCurl(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/missing" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte("hello " + r.URL.Query().Get("request")))
	}))
	defer srv.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := l.Addr().String()
	l.Close()
	out := filepath.Join(t.TempDir(), "body")

	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stdout string
	}{
		{"body", []string{"-g", "-q", "-s", srv.URL + "/dial?request=hostname&x=1"}, 0, "hello hostname"},
		{"no scheme", []string{"-s", srv.Listener.Addr().String() + "/?request=x"}, 0, "hello x"},
		{"write-out", []string{"-g", "-q", "-s", "-o", "/dev/null", "-w", "%{http_code}", srv.URL + "/missing"}, 0, "404"},
		{"output file", []string{"-s", "-o", out, "-w", "%{http_code}", srv.URL}, 0, "200"},
		{"fail", []string{"-s", "-f", srv.URL + "/missing"}, 22, ""},
		{"refused", []string{"-s", "--max-time", "15", "--connect-timeout", "1", "http://" + closed + "/hostName"}, 7, ""},
		{"interface address", []string{"-g", "--connect-timeout", "5", "--interface", "127.0.0.1", srv.URL + "/?request=src"}, 0, "hello src"},
		{"interface name", []string{"--interface", "lo", srv.URL + "/?request=lo"}, 0, "hello lo"},
		{"no such interface", []string{"--interface", "shimd-no-such-if", srv.URL}, 45, ""},
		{"unknown option", []string{"--data", "x", srv.URL}, 2, ""},
		{"no url", []string{"-s"}, 2, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(tc.args, &stdout, &stderr)
			require.Equal(t, tc.code, code, "stderr: %s", stderr.String())
			require.Equal(t, tc.stdout, stdout.String())
		})
	}
	b, err := os.ReadFile(out)
	require.NoError(t, err)
	require.Equal(t, "hello ", string(b))
}
