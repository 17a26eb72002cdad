// Command shimd-vm-agent runs inside the test virtual machine (critest/vm) as a
// systemd service and runs the host's commands there. It reads requests, one JSON
// object per line, from a virtio-serial port and answers with frames of the same
// kind: the command's output as it comes, then its exit status. Each command runs
// under bash as soon as it is read, beside any still running: a command stuck
// where a kill cannot end it (a process in uninterruptible sleep) must not stop
// the agent from running the next, or the host's diagnostics. Each frame names its
// request so that a client which reconnects never reads the output of an earlier
// one.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/shimd/shimd/critest/vm/wire"
)

func main() {
	port := flag.String("port", wire.GuestPort, "virtio-serial port to serve")
	flag.Parse()
	f, err := os.OpenFile(*port, os.O_RDWR, 0)
	if err != nil {
		log.Fatal(err)
	}
	a := &agent{w: json.NewEncoder(f)}
	r := bufio.NewReader(f)
	for {
		line, err := r.ReadBytes('\n')
		if errors.Is(err, io.EOF) && len(line) == 0 {
			// No host client is connected: the port reads as empty.
			time.Sleep(100 * time.Millisecond)
			continue
		}
		if err != nil && !errors.Is(err, io.EOF) {
			log.Fatal(err)
		}
		var req wire.Request
		if err := json.Unmarshal(line, &req); err != nil {
			log.Printf("bad request %q: %v", line, err)
			continue
		}
		go a.run(req)
	}
}

type agent struct {
	mu sync.Mutex
	w  *json.Encoder
}

// send writes one frame; with no client connected the frame is dropped. A frame
// that cannot be written is logged (the journal of shimd-vm-agent): a lost exit frame
// leaves the host waiting for its command until the command's deadline.
func (a *agent) send(f wire.Frame) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.w.Encode(f); err != nil {
		log.Printf("request %d: frame not sent (exit frame %t): %v", f.ID, f.Exit != nil, err)
	}
}

func (a *agent) run(req wire.Request) {
	ctx := context.Background()
	if req.TimeoutSeconds > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(req.TimeoutSeconds)*time.Second)
		defer cancel()
	}
	cmd := exec.CommandContext(ctx, "/bin/bash", "-c", req.Cmd)
	cmd.Dir = "/"
	cmd.Env = append(os.Environ(), "PATH="+wire.GuestPath, "HOME=/root")
	out := &frameWriter{a: a, id: req.ID}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	// A command that leaves a child holding its output (a daemon started with &)
	// still ends: its pipes close this long after the command exited.
	cmd.WaitDelay = 2 * time.Second
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
		if code < 0 {
			code = 128 + int(ee.Sys().(syscall.WaitStatus).Signal())
		}
		err = nil
		if ctx.Err() != nil {
			err = fmt.Errorf("timed out after %d s", req.TimeoutSeconds)
		}
	case errors.Is(err, exec.ErrWaitDelay):
		err = nil
	}
	f := wire.Frame{ID: req.ID, Exit: &code}
	if err != nil {
		f.Err = err.Error()
	}
	a.send(f)
}

// frameWriter sends what a command writes as output frames of its request.
type frameWriter struct {
	a  *agent
	id uint64
}

func (w *frameWriter) Write(p []byte) (int, error) {
	w.a.send(wire.Frame{ID: w.id, Out: append([]byte(nil), p...)})
	return len(p), nil
}
