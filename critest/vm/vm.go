// Package vm boots the test virtual machine, a Debian 12 guest with systemd as PID 1
// on a pure cgroup v2 hierarchy, under QEMU's software emulation (these hosts cannot
// run a stock kernel under KVM: ../../docs/testing.md), and runs commands in it
// through its agent (critest/vm/agent) on a virtio-serial port.
//
// The guest's disk is the image critest/vm/image.sh builds, opened with snapshot=on:
// every boot starts from the same clean disk and nothing is written back. Host
// directories are shared read-only or read-write over 9p; the share tagged "host"
// is mounted at /mnt/host and holds the agent and the binaries under test.
package vm

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/shimd/shimd/critest/vm/wire"
)

// Share is a host directory the guest mounts over 9p by its tag. The image's fstab
// mounts "host" at /mnt/host, "tools" at /mnt/tools and "registry" at /mnt/registry.
type Share struct {
	Tag, Path string
	ReadOnly  bool
}

// Config is one boot.
type Config struct {
	// Image is the directory image.sh made: disk.raw, vmlinuz, initrd.img.
	Image string
	// Dir holds the VM's sockets, console log, QEMU's log and pid file, and the
	// disk's snapshot overlay.
	Dir    string
	Shares []Share
	// MemoryMiB and CPUs default to 4096 and the host's CPU count (at most 4).
	MemoryMiB, CPUs int
	// Cmdline is added to the kernel command line.
	Cmdline string
	// BootTimeout bounds the wait for the agent; default 5 minutes.
	BootTimeout time.Duration
	// Forwards give the guest a network interface (eth0, GuestIP on GuestNet) that
	// reaches nothing but these host ports (QEMU user networking, restrict=on).
	// Without them (and without Tap) the guest has no network device.
	Forwards []Forward
	// Tap, instead of Forwards, gives the guest's eth0 this host tap device (made
	// and put on a bridge by the caller): the guest is one more host on that
	// bridge, with no address until it sets one (critest/kubeadm's guest node).
	Tap string
}

// Forward makes TCP connections of the guest to Addr (an address on GuestNet,
// "198.18.254.100:6443") reach the host's 127.0.0.1:HostPort.
type Forward struct {
	Addr     string
	HostPort int
}

// The guest's side of Forwards: its address on QEMU's user network. Pods in the
// guest use 198.19.0.0/17; this net is the guest's own.
const (
	GuestNet = "198.18.254.0/24"
	GuestIP  = "198.18.254.15"
)

// VM is a started guest.
type VM struct {
	dir  string
	pid  int
	proc *os.Process // nil when attached to a VM another process started
	done chan struct{}

	mu   sync.Mutex
	conn net.Conn
	dec  *json.Decoder
	next uint64
}

// Files of a VM's directory.
const (
	agentSocket   = "agent.sock"
	consoleSocket = "console.sock"
	ConsoleLog    = "console.log"
	qemuLog       = "qemu.log"
	pidFile       = "qemu.pid"
)

// Start boots a guest in the background and waits until its agent answers. The
// QEMU process is in its own session: it outlives the caller unless stopped.
func Start(ctx context.Context, cfg Config) (*VM, error) {
	if cfg.MemoryMiB == 0 {
		cfg.MemoryMiB = 4096
	}
	if cfg.CPUs == 0 {
		cfg.CPUs = min(4, runtime.NumCPU())
	}
	if cfg.BootTimeout == 0 {
		cfg.BootTimeout = 5 * time.Minute
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, err
	}
	for _, f := range []string{agentSocket, consoleSocket, pidFile} {
		_ = os.Remove(filepath.Join(cfg.Dir, f))
	}
	logf, err := os.Create(filepath.Join(cfg.Dir, qemuLog))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command("qemu-system-x86_64", qemuArgs(cfg)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// The snapshot overlay of the disk is a temporary file: keep it in Dir.
	cmd.Env = append(os.Environ(), "TMPDIR="+cfg.Dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start qemu: %w", err)
	}
	v := &VM{dir: cfg.Dir, pid: cmd.Process.Pid, proc: cmd.Process, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(v.done) }()
	if err := os.WriteFile(filepath.Join(cfg.Dir, pidFile), []byte(strconv.Itoa(v.pid)), 0o644); err != nil {
		v.Kill()
		return nil, err
	}
	bctx, cancel := context.WithTimeout(ctx, cfg.BootTimeout)
	defer cancel()
	if err := v.waitAgent(bctx); err != nil {
		v.Kill()
		return nil, fmt.Errorf("%w\n%s", err, v.tail())
	}
	return v, nil
}

func qemuArgs(cfg Config) []string {
	img := func(f string) string { return filepath.Join(cfg.Image, f) }
	args := []string{
		"-accel", "tcg,thread=multi", "-cpu", "max",
		"-m", strconv.Itoa(cfg.MemoryMiB), "-smp", strconv.Itoa(cfg.CPUs),
		"-display", "none", "-no-reboot",
		"-kernel", img("vmlinuz"), "-initrd", img("initrd.img"),
		"-append", strings.TrimSpace("root=/dev/vda rw console=ttyS0 panic=-1 net.ifnames=0 " + cfg.Cmdline),
		"-drive", "file=" + img("disk.raw") + ",format=raw,if=virtio,snapshot=on,cache=unsafe",
		"-device", "virtio-serial-pci",
		"-chardev", "socket,id=agent,path=" + filepath.Join(cfg.Dir, agentSocket) + ",server=on,wait=off",
		"-device", "virtserialport,chardev=agent,name=" + wire.PortName,
		"-chardev", "socket,id=con,path=" + filepath.Join(cfg.Dir, consoleSocket) + ",server=on,wait=off,logfile=" + filepath.Join(cfg.Dir, ConsoleLog),
		"-serial", "chardev:con",
		"-device", "virtio-rng-pci",
	}
	switch {
	case cfg.Tap != "":
		args = append(args, "-netdev", "tap,id=n0,ifname="+cfg.Tap+",script=no,downscript=no",
			"-device", "virtio-net-pci,netdev=n0")
	case len(cfg.Forwards) == 0:
		args = append(args, "-nic", "none")
	default:
		// restrict=on: the guest reaches neither the host nor anything beyond it,
		// only the guestfwd targets; each connection runs its own busybox nc.
		netdev := "user,id=n0,net=" + GuestNet + ",dhcpstart=" + GuestIP + ",restrict=on"
		for _, f := range cfg.Forwards {
			netdev += fmt.Sprintf(",guestfwd=tcp:%s-cmd:busybox nc 127.0.0.1 %d", f.Addr, f.HostPort)
		}
		args = append(args, "-netdev", netdev, "-device", "virtio-net-pci,netdev=n0")
	}
	for _, s := range cfg.Shares {
		opt := "local,path=" + s.Path + ",mount_tag=" + s.Tag + ",security_model=passthrough,id=fs-" + s.Tag
		if s.ReadOnly {
			opt += ",readonly=on"
		}
		args = append(args, "-virtfs", opt)
	}
	return args
}

// Attach finds the VM that Start left running in dir (vmctl's later commands).
func Attach(dir string) (*VM, error) {
	b, err := os.ReadFile(filepath.Join(dir, pidFile))
	if err != nil {
		return nil, fmt.Errorf("no VM in %s: %w", dir, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", pidFile, err)
	}
	if syscall.Kill(pid, 0) != nil {
		return nil, fmt.Errorf("the VM of %s (pid %d) is not running", dir, pid)
	}
	return &VM{dir: dir, pid: pid}, nil
}

// Dir is the VM's directory.
func (v *VM) Dir() string { return v.dir }

// PID is QEMU's.
func (v *VM) PID() int { return v.pid }

// waitAgent pings until the agent answers: the port accepts a client as soon as
// QEMU runs, long before the guest's agent reads it.
func (v *VM) waitAgent(ctx context.Context) error {
	for {
		pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		code, err := v.Run(pctx, "true", io.Discard)
		cancel()
		if err == nil && code == 0 {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("the guest's agent did not answer: %w (last: %v)", ctx.Err(), err)
		}
		if v.exited() {
			return errors.New("qemu exited during boot")
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func (v *VM) exited() bool {
	if v.done != nil {
		select {
		case <-v.done:
			return true
		default:
			return false
		}
	}
	return syscall.Kill(v.pid, 0) != nil
}

// Run runs cmd under bash in the guest, copies its output (stdout and stderr
// together) to out and returns its exit status. ctx's deadline also bounds the
// command in the guest.
func (v *VM) Run(ctx context.Context, cmd string, out io.Writer) (int, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if err := v.connect(); err != nil {
		return -1, err
	}
	v.next++
	req := wire.Request{ID: uint64(time.Now().UnixNano()) ^ v.next, Cmd: cmd}
	if dl, ok := ctx.Deadline(); ok {
		req.TimeoutSeconds = max(1, int(time.Until(dl).Seconds()+0.999))
	}
	if err := ctx.Err(); err != nil {
		return -1, fmt.Errorf("guest command %q: %w", cmd, err)
	}
	// Cleared before the cancel can set it: a cancel that came first must hold.
	_ = v.conn.SetDeadline(time.Time{})
	stop := context.AfterFunc(ctx, func() { _ = v.conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if err := json.NewEncoder(v.conn).Encode(req); err != nil {
		v.disconnect()
		return -1, err
	}
	for {
		var f wire.Frame
		if err := v.dec.Decode(&f); err != nil {
			v.disconnect()
			if ctx.Err() != nil {
				return -1, fmt.Errorf("guest command %q: %w", cmd, ctx.Err())
			}
			return -1, fmt.Errorf("agent: %w", err)
		}
		if f.ID != req.ID {
			continue // an earlier client's request
		}
		if len(f.Out) > 0 {
			_, _ = out.Write(f.Out)
		}
		if f.Exit != nil {
			if f.Err != "" {
				return *f.Exit, fmt.Errorf("guest command %q: %s", cmd, f.Err)
			}
			return *f.Exit, nil
		}
	}
}

// Output runs cmd and returns its output; a non-zero exit is an error that
// carries the output.
func (v *VM) Output(ctx context.Context, cmd string) (string, error) {
	var b strings.Builder
	code, err := v.Run(ctx, cmd, &b)
	if err == nil && code != 0 {
		err = fmt.Errorf("guest command %q: exit status %d", cmd, code)
	}
	if err != nil {
		return b.String(), fmt.Errorf("%w\n%s", err, b.String())
	}
	return b.String(), nil
}

func (v *VM) connect() error {
	if v.conn != nil {
		return nil
	}
	c, err := net.Dial("unix", filepath.Join(v.dir, agentSocket))
	if err != nil {
		return fmt.Errorf("agent socket: %w", err)
	}
	v.conn, v.dec = c, json.NewDecoder(bufio.NewReader(c))
	return nil
}

func (v *VM) disconnect() {
	if v.conn != nil {
		v.conn.Close()
		v.conn, v.dec = nil, nil
	}
}

// Close lets go of the agent connection; the VM runs on.
func (v *VM) Close() {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.disconnect()
}

// Stop powers the guest off (systemd stops its services) and waits for QEMU to
// end, killing it after timeout.
func (v *VM) Stop(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_, _ = v.Run(ctx, "systemctl --no-block poweroff", io.Discard)
	cancel()
	v.Close()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if v.exited() {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	v.Kill()
	return fmt.Errorf("the guest did not power off in %s: killed", timeout)
}

// Kill ends QEMU at once.
func (v *VM) Kill() {
	// QEMU first: its end also ends a Run that holds the connection.
	_ = syscall.Kill(v.pid, syscall.SIGKILL)
	v.Close()
	if v.done != nil {
		<-v.done
		return
	}
	for i := 0; i < 50 && syscall.Kill(v.pid, 0) == nil; i++ {
		time.Sleep(100 * time.Millisecond)
	}
}

// QEMUThreads describes QEMU's threads as the host sees them: name, state, CPU
// ticks, kernel wait channel and kernel stack. It tells a guest that stopped
// (vCPU threads asleep in the host kernel, or spinning) from one whose kernel
// hangs on its own.
func (v *VM) QEMUThreads() string {
	var b strings.Builder
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", v.pid))
	if err != nil {
		return err.Error() + "\n"
	}
	for _, t := range tasks {
		dir := fmt.Sprintf("/proc/%d/task/%s/", v.pid, t.Name())
		read := func(f string) string { d, _ := os.ReadFile(dir + f); return strings.TrimSpace(string(d)) }
		// stat: "tid (comm) state ... utime(14) stime(15)"; comm may hold spaces.
		stat := read("stat")
		state, ticks := "?", "?"
		if i := strings.LastIndexByte(stat, ')'); i >= 0 {
			if f := strings.Fields(stat[i+1:]); len(f) > 13 {
				state, ticks = f[0], f[11]+"+"+f[12]
			}
		}
		fmt.Fprintf(&b, "%s %-16s %s ticks %s wchan %s\n", t.Name(), read("comm"), state, ticks, read("wchan"))
		if st := read("stack"); st != "" {
			fmt.Fprintf(&b, "  %s\n", strings.ReplaceAll(st, "\n", "\n  "))
		}
	}
	return b.String()
}
