package network

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Runsc reaches into gVisor sandboxes with the runsc command line.
//
// In a gVisor pod the network stack (netstack) runs inside the sandbox's Sentry: the
// pod's network namespace only carries its packets, and the pod's loopback exists
// only in the Sentry. Dialling 127.0.0.1 inside the network namespace, as for runc
// pods, reaches nothing; "runsc port-forward --stream" hands the Sentry one end of a
// unix socket, and the Sentry connects it to the port on its own loopback.
type Runsc struct {
	// Binary is the runsc binary (a bare name is looked up in PATH).
	Binary string
	// Root is the state root of the sandboxes: the shim's root joined with the
	// containerd namespace, as containerd-shim-runsc-v1 runs runsc.
	Root string
	// Flags are global runsc flags the shim passes too ("--platform=systrap", ...).
	Flags []string
	// SocketDir holds the short-lived unix sockets of port forwards.
	SocketDir string
}

// dialTimeout bounds one "runsc port-forward --stream".
const dialTimeout = 10 * time.Second

// DialSandbox connects to port on the loopback of the gVisor sandbox id (the id of
// the pod's first container, the pause container). A port nobody listens on is an
// error naming the port.
func (r Runsc) DialSandbox(ctx context.Context, id string, port int32) (net.Conn, error) {
	if err := os.MkdirAll(r.SocketDir, 0o700); err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(r.SocketDir, "pf-*.sock")
	if err != nil {
		return nil, err
	}
	path := f.Name()
	f.Close()
	os.Remove(path)
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("port forward socket: %w", err)
	}
	defer l.Close() // also removes the socket file
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	args := append(append([]string{"--root", r.Root}, r.Flags...),
		"port-forward", "--stream", path, id, strconv.Itoa(int(port)))
	cmd := exec.CommandContext(ctx, r.Binary, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("run %s port-forward: %w", r.Binary, err)
	}
	_ = l.SetDeadline(time.Now().Add(dialTimeout)) // Accept never outlives the dial
	accepted := make(chan *net.UnixConn, 1)
	go func() {
		c, err := l.AcceptUnix()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	// runsc connects first, then asks the Sentry to dial the port, and exits with the
	// Sentry's answer: the connection is usable only if runsc succeeded.
	runErr := cmd.Wait()
	if runErr != nil {
		l.Close() // ends an Accept that never came
		if conn, ok := <-accepted; ok {
			conn.Close()
		}
		return nil, fmt.Errorf("connect to port %d in the gVisor sandbox %s: %w", port, id, runscError(runErr, out.String()))
	}
	conn, ok := <-accepted
	if !ok {
		return nil, fmt.Errorf("connect to port %d in the gVisor sandbox %s: runsc did not connect", port, id)
	}
	return conn, nil
}

// runscError names the failure from runsc's output (its last line), else the exit.
func runscError(err error, out string) error {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if last := strings.TrimSpace(lines[len(lines)-1]); last != "" {
		return errors.New(last)
	}
	return err
}

// SandboxRoot is the runsc state root for the containerd namespace ns under the
// shim's root (empty: the runsc shim's default, /run/containerd/runsc).
func SandboxRoot(shimRoot, ns string) string {
	if shimRoot == "" {
		shimRoot = "/run/containerd/runsc"
	}
	return filepath.Join(shimRoot, ns)
}
