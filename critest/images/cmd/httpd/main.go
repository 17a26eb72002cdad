// Command httpd is the offline stand-in for
// registry.k8s.io/e2e-test-images/httpd:2.4.39-4, which critest's
// multi-container spec runs: it serves /usr/local/apache2/htdocs with HTTP
// 200 on port 80 and writes a line holding the word "httpd" to its log
// (stderr, as Apache does). SIGTERM, SIGINT and SIGWINCH (Apache's
// graceful stop, the image's StopSignal) end it with status 0.
//
// It is built static by critest/images/cmd/mkimages; nothing imports it.
package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

const htdocs = "/usr/local/apache2/htdocs"

func main() {
	ln, err := net.Listen("tcp", ":80")
	if err != nil {
		fmt.Fprintf(os.Stderr, "httpd: (98)could not bind to address [::]:80: %v\n", err)
		os.Exit(1)
	}
	srv := &http.Server{Handler: http.FileServer(http.Dir(htdocs)), ReadHeaderTimeout: 10 * time.Second}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGWINCH)
	go func() {
		sig := <-sigs
		fmt.Fprintf(os.Stderr, "httpd: caught %v, shutting down\n", sig)
		_ = srv.Close()
	}()
	fmt.Fprintf(os.Stderr, "httpd: shimd stand-in for Apache/2.4.39 (Unix) configured -- resuming normal operations on :80, pid %d\n", os.Getpid())
	if err := srv.Serve(ln); err != nil && err != http.ErrServerClosed {
		fmt.Fprintf(os.Stderr, "httpd: %v\n", err)
		os.Exit(1)
	}
}
