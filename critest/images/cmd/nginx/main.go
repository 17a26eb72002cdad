// Command nginx is the offline stand-in for the nginx images critest runs
// (registry.k8s.io/e2e-test-images/nginx:1.14-2 and
// gcr.io/k8s-staging-cri-tools/hostnet-nginx-amd64). It does what critest
// checks and nothing more:
//
//   - it serves the files under /usr/share/nginx/html with HTTP 200 on the
//     port of the first "listen N;" line of /etc/nginx/conf.d/default.conf
//     (80 without one: the hostnet image's file says 12003, as upstream's);
//   - it writes its PID to /var/run/nginx.pid once it listens;
//   - it is named nginx (its binary is /usr/sbin/nginx, so pidof finds it)
//     and re-executes itself with argv[0] "nginx: master process ...", so
//     /proc/<pid>/cmdline says "master process" like the real master;
//   - SIGTERM, SIGINT (fast shutdown) and SIGQUIT (graceful) end it with
//     status 0; each request is logged to stdout in nginx's access format.
//
// It is built static by critest/images/cmd/mkimages; nothing imports it.
package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const (
	confPath = "/etc/nginx/conf.d/default.conf"
	pidPath  = "/var/run/nginx.pid"
	htmlDir  = "/usr/share/nginx/html"
	master   = "nginx: master process "
)

func main() {
	if !strings.HasPrefix(os.Args[0], master) {
		reexecAsMaster()
	}
	port, err := listenPort(confPath)
	if err != nil {
		fail(err)
	}
	ln, err := net.Listen("tcp", ":"+strconv.Itoa(port))
	if err != nil {
		fail(err)
	}
	if err := os.WriteFile(pidPath, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		fail(err)
	}
	srv := &http.Server{Handler: accessLog(http.FileServer(http.Dir(htmlDir))), ReadHeaderTimeout: 10 * time.Second}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGQUIT)
	go func() {
		sig := <-sigs
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if sig == syscall.SIGQUIT {
			_ = srv.Shutdown(ctx)
		} else {
			_ = srv.Close()
		}
	}()
	fmt.Fprintf(os.Stderr, "nginx: shimd stand-in listening on :%d, pid %d\n", port, os.Getpid())
	if err := srv.Serve(ln); err != nil && err != http.ErrServerClosed {
		fail(err)
	}
	os.Remove(pidPath)
}

// reexecAsMaster replaces the process (same PID) with itself under the
// argv[0] the real nginx master shows. It execs the binary's own path, not
// /proc/self/exe, so that the kernel's process name stays "nginx".
func reexecAsMaster() {
	exe, err := os.Executable()
	if err != nil {
		fail(err)
	}
	fail(syscall.Exec(exe, []string{master + strings.Join(os.Args, " ")}, os.Environ()))
}

// listenPort reads the first "listen N;" directive of the config file.
func listenPort(path string) (int, error) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return 80, nil
	}
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(strings.TrimSuffix(strings.TrimSpace(sc.Text()), ";"))
		if len(fields) == 2 && fields[0] == "listen" {
			return strconv.Atoi(fields[1])
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 80, nil
}

func accessLog(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r)
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		fmt.Printf("%s - - [%s] %q 200 \"-\" %q\n", host,
			time.Now().Format("02/Jan/2006:15:04:05 -0700"), r.Method+" "+r.RequestURI+" "+r.Proto, r.UserAgent())
	})
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "nginx: [emerg] %v\n", err)
	os.Exit(1)
}
