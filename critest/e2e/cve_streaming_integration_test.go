//go:build integration

package e2e

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/client-go/tools/remotecommand"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
)

// Replays of published resource-exhaustion vulnerabilities of containerd's CRI
// plugin and CRI-O in ExecSync, Exec and Attach (docs/operating.md, "Security").

// debugEnv is an imageEnv whose shimd serves /debug/stats on a unix socket.
func debugEnv(t *testing.T) (*harness.Env, string) {
	t.Helper()
	requireRoot(t)
	sock := filepath.Join(t.TempDir(), "debug.sock")
	env, _ := imageEnv(t, harness.Options{Shimd: harness.ShimdOptions{ExtraConfig: fmt.Sprintf("[debug]\naddress = %q\n", sock)}})
	pull(t, env, busyboxImage)
	return env, sock
}

// memKiB reads a field of /proc/<pid>/status ("VmRSS", "VmHWM") in KiB.
func memKiB(t *testing.T, pid int, field string) int {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(t, err)
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			require.NoError(t, err)
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// CVE-2022-31030 (containerd) and CVE-2022-1708 (CRI-O): ExecSync kept all of a
// command's output in memory, so a command printing without end exhausted the
// daemon's memory. The output must be capped (16 MiB a stream, as containerd's fix)
// and shimd's peak memory stay far below what the command printed (1 GiB).
func TestCVE_2022_31030_ExecSyncOutputBounded(t *testing.T) {
	env, _ := debugEnv(t)
	rs := env.Shimd.Runtime(t)
	pod := newPod(t, rs, "execsync")
	id := pod.run(pod.container("c", "sleep", "3600"))
	pid := env.Shimd.PID()
	before := memKiB(t, pid, "VmHWM")

	const half = 512 << 20
	resp, err := execSync(t, rs, id, 120, "sh", "-c", fmt.Sprintf("head -c %d /dev/zero; head -c %d /dev/zero >&2", half, half))
	require.NoError(t, err)
	t.Logf("ExecSync of 1 GiB of output: %d bytes of stdout, %d of stderr", len(resp.Stdout), len(resp.Stderr))
	require.LessOrEqual(t, len(resp.Stdout), 16<<20)
	require.LessOrEqual(t, len(resp.Stderr), 16<<20)
	require.NotEmpty(t, resp.Stdout)

	// Endless output until the timeout.
	_, err = execSync(t, rs, id, 3, "yes", "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef")
	require.Equal(t, codes.DeadlineExceeded, status.Code(err), "%v", err)
	after := memKiB(t, pid, "VmHWM")
	t.Logf("shimd's peak resident memory: %d KiB before, %d KiB after", before, after)
	require.Less(t, after-before, 256<<10, "shimd's memory grew with the output")
	stopRemove(t, rs, pod.id)
}

// CVE-2022-23471 (containerd): the CRI stream server started a goroutine for a TTY
// exec's resize events that, when the process failed to start, waited forever to hand
// them on: each such exec leaked it. After TTY execs of missing and of real commands,
// resized all along, shimd's goroutines must be back where they were.
func TestCVE_2022_23471_TerminalResizeLeak(t *testing.T) {
	env, sock := debugEnv(t)
	rs := env.Shimd.Runtime(t)
	pod := newPod(t, rs, "resize")
	id := pod.run(pod.container("c", "sleep", "3600"))
	debug := debugClient(sock)
	session := func(i int) {
		cmd := []string{"/no/such/command"}
		if i%2 == 1 {
			cmd = []string{"sh", "-c", "sleep 0.2"}
		}
		u := execURL(t, rs, &runtimeapi.ExecRequest{ContainerId: id, Cmd: cmd, Tty: true, Stdin: true, Stdout: true})
		q := &sizeQueue{done: make(chan struct{})}
		for n := 0; n < 50; n++ {
			q.sizes = append(q.sizes, remotecommand.TerminalSize{Width: uint16(80 + n), Height: uint16(24 + n)})
		}
		pr, pw := io.Pipe()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := executor(t, protocols[i%2], u).StreamWithContext(ctx, remotecommand.StreamOptions{
			Stdin: pr, Stdout: io.Discard, Tty: true, TerminalSizeQueue: q})
		cancel()
		pw.Close()
		close(q.done)
		if i < 2 {
			t.Logf("session %d (%s, %q): %v", i, protocols[i%2], cmd, err)
		}
	}
	for i := 0; i < 4; i++ { // warm up
		session(i)
	}
	base := stableStats(t, debug)
	for i := 0; i < 100; i++ {
		session(i)
	}
	t.Logf("baseline %d goroutines, after 100 sessions %d", base.Goroutines, getStats(t, debug).Goroutines)
	waitSettled(t, debug, base, debugStats{Goroutines: 10, OpenFDs: 4}, 60*time.Second)
	stopRemove(t, rs, pod.id)
}

// CVE-2025-64329 (containerd): each CRI Attach whose client went away left
// goroutines behind. After attaching to TTY and non-TTY containers 100 times and
// leaving, mid-stream or at once, shimd's goroutines must be back where they were.
func TestCVE_2025_64329_AttachGoroutineLeak(t *testing.T) {
	env, sock := debugEnv(t)
	rs := env.Shimd.Runtime(t)
	pod := newPod(t, rs, "attach")
	ticker := []string{"sh", "-c", "while :; do echo tick; sleep 0.1; done"}
	ids := map[bool]string{}
	for _, tty := range []bool{false, true} {
		cfg := pod.container("tty-"+strconv.FormatBool(tty), ticker...)
		cfg.Stdin, cfg.Tty = true, tty
		ids[tty] = pod.run(cfg)
	}
	debug := debugClient(sock)
	session := func(i int) {
		tty := i%2 == 1
		u := attachURL(t, rs, &runtimeapi.AttachRequest{ContainerId: ids[tty], Stdin: true, Stdout: true, Stderr: !tty, Tty: tty})
		out := &syncBuffer{}
		pr, pw := io.Pipe()
		opts := remotecommand.StreamOptions{Stdin: pr, Stdout: out, Tty: tty}
		if !tty {
			opts.Stderr = io.Discard
		}
		q := &sizeQueue{done: make(chan struct{})}
		if tty {
			q.sizes = []remotecommand.TerminalSize{{Width: 100, Height: 30}, {Width: 120, Height: 40}}
			opts.TerminalSizeQueue = q
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		done := make(chan error, 1)
		go func() { done <- executor(t, protocols[(i/2)%2], u).StreamWithContext(ctx, opts) }()
		if i%4 < 2 { // leave once output flows; else at once
			for !strings.Contains(out.String(), "tick") && ctx.Err() == nil {
				time.Sleep(10 * time.Millisecond)
			}
		}
		cancel()
		<-done
		pw.Close()
		close(q.done)
	}
	for i := 0; i < 8; i++ {
		session(i)
	}
	base := stableStats(t, debug)
	for i := 0; i < 100; i++ {
		session(i)
	}
	t.Logf("baseline %d goroutines, after 100 attaches %d", base.Goroutines, getStats(t, debug).Goroutines)
	waitSettled(t, debug, base, debugStats{Goroutines: 10, OpenFDs: 4}, 60*time.Second)
	for _, id := range ids {
		require.Equal(t, runtimeapi.ContainerState_CONTAINER_RUNNING, containerStatus(t, rs, id).State)
	}
	stopRemove(t, rs, pod.id)
}
