package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// registryBinary is Debian's CNCF distribution registry (package
// docker-registry, version 2.8).
const registryBinary = "/usr/bin/docker-registry"

// registry is a docker-registry this program started to push into.
type registry struct {
	URL  string
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has been waited for
}

// startRegistry serves storage read-write on 127.0.0.1 at a free port.
// work holds its config and log.
func startRegistry(storage, work string) (*registry, error) {
	if _, err := os.Stat(registryBinary); err != nil {
		return nil, fmt.Errorf("%w (apt-get install docker-registry)", err)
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		r, err := tryRegistry(storage, work, port)
		if err == nil {
			return r, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

func tryRegistry(storage, work string, port int) (*registry, error) {
	addr := "127.0.0.1:" + strconv.Itoa(port)
	cfg := fmt.Sprintf(`version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: %q
  delete:
    enabled: false
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: %q
  secret: shimd-mkimages
`, storage, addr)
	cfgPath := filepath.Join(work, "registry.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	logPath := filepath.Join(work, "registry.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(registryBinary, "serve", cfgPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	r := &registry{URL: "http://" + addr, cmd: cmd, done: make(chan struct{})}
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(r.done) }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(r.URL + "/v2/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return r, nil
			}
		}
		select {
		case <-r.done:
			b, _ := os.ReadFile(logPath)
			return nil, fmt.Errorf("docker-registry exited (%v):\n%s", waitErr, b)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			r.stop()
			return nil, fmt.Errorf("docker-registry on %s not ready after 20s", addr)
		}
	}
}

// stop ends the registry by its PID: SIGTERM, then SIGKILL after 10s.
func (r *registry) stop() {
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		_ = r.cmd.Process.Kill()
		<-r.done
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
