//go:build integration

// Package cgroupv2 runs shimd where users run it: a guest with systemd as PID 1 on a
// pure cgroup v2 hierarchy (critest/vm), shimd installed by `make install` with its
// systemd unit and the systemd cgroup driver, containerd 2.4.2 and runc 1.5.2. The
// tests drive crictl in the guest through the VM's agent and read the cgroup files
// the kernel sees. They run only with SHIMD_VM=1 (make e2e-cgroupv2 and its smoke
// subset in make check): a boot under QEMU's emulation takes a minute or more.
package cgroupv2

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shimd/shimd/critest/harness"
	"github.com/shimd/shimd/critest/vm"
)

// guest is the VM every test of this binary shares; share is its /mnt/host.
var (
	guest    *vm.VM
	share    string
	skipWhy  string
	vmDriver = "systemd"
	apiPort  int
	// seLinux: the guest is the SELinux one (SHIMD_VM_SELINUX=1, make e2e-selinux),
	// enforcing, with shimd's enable_selinux on.
	seLinux bool
)

// apiAddr is where the guest finds the host's API server (vm.Forward); the guest's
// /etc/hosts names it "kubernetes", a name in the API server's certificate.
const apiAddr = "198.18.254.100:6443"

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	flag.Parse() // -test.timeout, for the watchdog
	switch {
	case os.Getenv("SHIMD_VM") != "1":
		skipWhy = "SHIMD_VM=1 boots the cgroup v2 guest (make e2e-cgroupv2)"
		return m.Run()
	case os.Geteuid() != 0:
		skipWhy = "needs root"
		return m.Run()
	}
	seLinux = os.Getenv("SHIMD_VM_SELINUX") == "1"
	if d := os.Getenv("SHIMD_VM_CGROUP_DRIVER"); d != "" {
		vmDriver = d
	}
	dir, err := os.MkdirTemp("/var/tmp", "shimd-vm-test-")
	if err != nil {
		fmt.Println(err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	// The guest reaches one host port: the API server TestKubeletInPlaceResize
	// starts there.
	if apiPort, err = harness.FreeTCPPort(); err != nil {
		fmt.Println(err)
		return 1
	}
	guest, err = vm.Up(ctx, vm.UpConfig{Dir: dir, CgroupDriver: vmDriver, Log: os.Stdout,
		Forwards: []vm.Forward{{Addr: apiAddr, HostPort: apiPort}}, SELinux: seLinux})
	if err != nil {
		fmt.Println("vm:", err)
		return 1
	}
	share = filepath.Join(dir, "share")
	// The tests' image, from the offline image set the guest serves itself.
	out, err := guest.Output(ctx, "crictl pull docker.io/library/busybox:latest")
	if err != nil {
		fmt.Println("vm: pull the tests' image:", err, out)
		guest.Kill()
		return 1
	}
	out, err = guest.Output(ctx, `echo "guest: /sys/fs/cgroup is $(stat -fc %T /sys/fs/cgroup), PID 1 is $(cat /proc/1/comm), kernel $(uname -r), $(nproc) CPUs"`)
	fmt.Print(out)
	if err != nil {
		return 1
	}
	stopWatchdog := watchdog()
	code := m.Run()
	stopWatchdog()
	if why := deadGuest.Load(); why != nil {
		fmt.Printf("vm: the guest stopped answering (%s); the console's last 200 lines:\n%s", *why, guest.ConsoleTail(200))
		guest.Kill()
		fmt.Printf("vm: killed qemu; kept %s (console.log, qemu.log)\n", dir)
		return 1
	}
	// The tests may outlast the boot's context (critest in the guest alone takes
	// over 20 minutes): what follows has its own.
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// How often the shim's TaskOOM was lost (systemd removed the scope first) and
	// shimd told the OOM kill by the pod's count (container/oom.go).
	out, _ = guest.Output(ctx, `echo "guest: OOM exits told by the pod's count, the TaskOOM lost: $(journalctl -u shimd --no-pager | grep -c "OOM kills in its pod's cgroup")"`)
	fmt.Print(out)
	if code == 0 {
		// Every test removed what it made: nothing of shimd's may be left in the
		// guest. systemd stops an emptied pod slice a moment after its last scope:
		// leftovers must be gone within a minute, as the host harness waits too.
		var out string
		var err error
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(2 * time.Second) {
			out, err = guest.Output(ctx, vm.Leftovers)
			if (err == nil && out == "") || time.Now().After(deadline) {
				break
			}
		}
		fmt.Printf("guest: leftovers after the tests (waited up to a minute): %s", or(out, "none\n"))
		if err != nil || out != "" {
			code = 1
		}
	}
	if code != 0 {
		// What shimd and containerd said, for the failure's reader.
		logs, _ := guest.Output(ctx, "journalctl -u shimd -u containerd --no-pager -o short-precise | tail -n 150")
		fmt.Printf("--- journal of shimd and containerd in the guest (last 150 lines):\n%s", logs)
	}
	if err := guest.Stop(2 * time.Minute); err != nil {
		fmt.Println("vm:", err)
		code = 1
	}
	if code == 0 {
		_ = os.RemoveAll(dir)
	} else {
		fmt.Printf("vm: kept %s (console.log, qemu.log)\n", dir)
	}
	return code
}

func requireGuest(t *testing.T) {
	t.Helper()
	if guest == nil {
		t.Skip(skipWhy)
	}
	requireAnswering(t)
}

// requireAnswering stops a test at once when the guest no longer answers.
func requireAnswering(t *testing.T) {
	t.Helper()
	if why := deadGuest.Load(); why != nil {
		t.Fatalf("the guest no longer answers (%s)", *why)
	}
}

// deadGuest says why the guest stopped answering its agent; the tests after that
// fail at once instead of each waiting out its deadlines.
var deadGuest atomic.Pointer[string]

// started is when the test binary began; -timeout counts from about then.
var started = time.Now()

// watchdog kills the guest, with the console's tail, shortly before go test's
// -timeout would end the binary: that panic runs no clean-up, and QEMU, in a
// session of its own, would be left running.
func watchdog() (stop func()) {
	f := flag.Lookup("test.timeout")
	if f == nil {
		return func() {}
	}
	d, ok := f.Value.(flag.Getter).Get().(time.Duration)
	if !ok || d <= 2*time.Minute {
		return func() {}
	}
	timer := time.AfterFunc(time.Until(started.Add(d-time.Minute)), func() {
		fmt.Printf("vm: the tests are about to run past -timeout %s: the guest's console (last 200 lines):\n%s", d, guest.ConsoleTail(200))
		guest.Kill()
		fmt.Printf("vm: killed qemu; kept %s\n", guest.Dir())
	})
	return func() { timer.Stop() }
}

// sh runs a bash script in the guest and returns its output; a non-zero exit
// fails the test.
func sh(t *testing.T, script string) string {
	t.Helper()
	requireAnswering(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := guest.Output(ctx, script)
	onHang(t, err)
	require.NoError(t, err)
	return strings.TrimSpace(out)
}

// shCode runs a script and returns its exit status and output.
func shCode(t *testing.T, script string) (int, string) {
	t.Helper()
	requireAnswering(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var b strings.Builder
	code, err := guest.Run(ctx, script, &b)
	onHang(t, err)
	require.NoError(t, err)
	return code, strings.TrimSpace(b.String())
}

// onHang logs, when a guest command ran past its deadline, what the guest was
// doing: the stacks of shimd's and containerd's goroutines (both dump them on
// SIGUSR1, and go on), the process tree with each process's state and kernel wait
// channel, the kernel stacks of the tasks in uninterruptible sleep, and the
// journals since the test began. When the agent does not answer either, the same
// comes through the serial console's root shell, with the console's tail (the
// kernel's hung-task reports), and the guest is marked dead.
func onHang(t *testing.T, err error) {
	t.Helper()
	if !errors.Is(err, context.DeadlineExceeded) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out strings.Builder
	code, derr := guest.Run(ctx, `pkill -USR1 -x shimd; pkill -USR1 -x containerd; sleep 2
`+processStates+`
journalctl -u shimd -u containerd -u kubelet -u shimd-vm-agent --no-pager -o short-precise --since "-15min" | tail -n 5000
journalctl -k --no-pager -o short-precise --since "-15min" | tail -n 300`, &out)
	t.Logf("a guest command ran past its deadline; the guest after it (exit %d, %v):\n%s", code, derr, out.String())
	if derr == nil {
		return // the agent answered, whatever the script's exit status
	}
	before := guest.ConsoleTail(100)
	con, cerr := guest.ConsoleRun(processStates, time.Minute)
	t.Logf("the agent does not answer; the console's last 100 lines:\n%s\n--- then through the console's shell (%v):\n%s\n--- QEMU's threads on the host:\n%s",
		before, cerr, con, guest.QEMUThreads())
	why := fmt.Sprintf("in %s: %v", t.Name(), err)
	deadGuest.CompareAndSwap(nil, &why)
}

// processStates prints every process with its state and kernel wait channel, and
// the kernel stack of each one in uninterruptible sleep (D).
const processStates = `ps -eo pid,ppid,stat,wchan:32,etime,time,args --forest | cut -c1-220
for p in $(ps -eo pid=,stat= | awk '$2 ~ /^D/ {print $1}'); do echo "--- kernel stack of $p ($(cat /proc/$p/comm)):"; cat /proc/$p/stack; done`

// shAll runs scripts at once in the guest, each a background job of one agent command
// (the agent serves one command at a time, and each crictl under emulation is seconds
// of one virtual CPU), and returns each one's exit status and output (stdout and
// stderr, as sh's). It waits for all of them.
func shAll(t *testing.T, scripts ...string) (codes []int, outs []string) {
	t.Helper()
	dir := fmt.Sprintf("/tmp/shall-%d", time.Now().UnixNano())
	var b strings.Builder
	fmt.Fprintf(&b, "d=%s\nmkdir -p $d\n", dir)
	for i, s := range scripts {
		job := file(t, fmt.Sprintf("shall-%d-%d.sh", time.Now().UnixNano(), i), s)
		fmt.Fprintf(&b, "bash %s >$d/%d.out 2>&1 & p%d=$!\n", job, i, i)
	}
	for i := range scripts {
		fmt.Fprintf(&b, "wait $p%d; echo \"@@job %d $?\"; cat $d/%d.out\n", i, i, i)
	}
	b.WriteString("rm -rf $d\n")
	out := sh(t, b.String())
	codes, outs = make([]int, len(scripts)), make([]string, len(scripts))
	parts := strings.Split(out, "@@job ")
	require.Len(t, parts, len(scripts)+1, "the jobs' output: %q", out)
	for i, part := range parts[1:] {
		head, body, _ := strings.Cut(part, "\n")
		var n int
		_, err := fmt.Sscan(head, &n, &codes[i])
		require.NoError(t, err, "job header %q", head)
		require.Equal(t, i, n, "job order")
		outs[i] = strings.TrimSpace(body)
	}
	return codes, outs
}

// file writes content into the share and returns the guest's path of it.
func file(t *testing.T, name, content string) string {
	t.Helper()
	require.NoError(t, os.WriteFile(filepath.Join(share, name), []byte(content), 0o644))
	return "/mnt/host/" + name
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
