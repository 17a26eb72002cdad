package sandbox

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	taskv2 "github.com/containerd/containerd/api/runtime/task/v2"
	taskv3 "github.com/containerd/containerd/api/runtime/task/v3"
	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
	"github.com/containerd/log"

	"github.com/shimd/shimd/ctrd"
)

// Stopping an orphaned shim (shims.stop): delete its task, shut it down, wait for
// it to exit; the fallbacks for a shim whose bundle containerd deleted and for one
// stuck in its own start.

// stop asks a shim to delete its task (runc delete --force: the process and its
// cgroup go) and to shut down, and waits for it to exit. A shim that still serves
// other containers stays, and that is an error. A shim that does not answer at all
// and runs no process is killed: it is stuck in its own start (see stuckShim). A
// shim whose task's bundle containerd deleted gets it back for the delete (see
// withBundle); one that still does not exit, runs no process and whose own bundle
// is gone is killed.
func (sh shims) stop(ctx context.Context, s shimProc) error {
	var callErr error
	sock, err := listeningSocket(s.pid, shimSocketName(sh.address, sh.namespace, cmp.Or(s.socketID, s.id)))
	exited := false
	if err == nil {
		callErr, exited, err = deleteAndShutdown(ctx, sock, s)
	}
	if err == nil && !exited && callErr != nil && !errors.Is(callErr, context.DeadlineExceeded) && !errdefs.IsNotFound(errgrpc.ToNative(callErr)) {
		callErr, exited = withBundle(ctx, sock, s, callErr)
	}
	if exited {
		// A shim whose bundle is gone cannot find its socket to remove it.
		_ = os.Remove(sock)
		return nil
	}
	stuck := err == nil && stuckShim(callErr, s.pid)
	// A shim that runs no process and whose bundle containerd deleted, yet does not
	// shut down, holds a task it cannot delete of an id nobody knows any more: a
	// create that finished after containerd gave up on it, in a pod's shared shim
	// (whose socket, named after a pod that is gone, is not found either).
	lost := !hasChildren(s.pid) && bundleGone(s.pid)
	if !stuck && !lost {
		switch {
		case err != nil:
			return err
		case callErr != nil:
			return fmt.Errorf("the shim did not exit: it still serves other tasks (delete of task %s: %w)", s.id, callErr)
		default:
			return errors.New("the shim did not exit: it still serves other tasks")
		}
	}
	if stuck {
		log.G(ctx).WithField("pid", s.pid).Warn("shim never answered and runs no process: stuck in its start; killing it")
	} else {
		log.G(ctx).WithField("pid", s.pid).WithError(cmp.Or(err, callErr)).Warn("shim runs no process and containerd deleted its bundle, but it does not shut down: killing it")
	}
	_ = syscall.Kill(s.pid, syscall.SIGKILL)
	kctx, kcancel := context.WithTimeout(ctx, 5*time.Second)
	defer kcancel()
	if !waitExit(kctx, s.pid) {
		return errors.New("the shim did not exit after SIGKILL")
	}
	if sock != "" {
		_ = os.Remove(sock)
	}
	return nil
}

// deleteAndShutdown asks the shim on sock to delete task s.id and to shut down, and
// waits up to 5 s in all for it to exit. callErr is the delete's error.
func deleteAndShutdown(ctx context.Context, sock string, s shimProc) (callErr error, exited bool, err error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	tc, err := ctrd.DialShim(cctx, sock)
	if err != nil {
		return nil, false, err
	}
	defer tc.Close()
	_, callErr = taskv3.NewTTRPCTaskClient(tc).Delete(cctx, &taskv3.DeleteRequest{ID: s.id})
	if ctrd.ShimLacksV3(callErr) {
		v2 := taskv2.NewTTRPCTaskClient(tc)
		_, callErr = v2.Delete(cctx, &taskv2.DeleteRequest{ID: s.id})
		_, _ = v2.Shutdown(cctx, &taskv2.ShutdownRequest{ID: s.id, Now: true})
	} else {
		_, _ = taskv3.NewTTRPCTaskClient(tc).Shutdown(cctx, &taskv3.ShutdownRequest{ID: s.id, Now: true})
	}
	return callErr, waitExit(cctx, s.pid), nil
}

// withBundle deletes task s.id again with its bundle directory made anew, and
// removes the directory afterwards. A shim keeps a task whose delete fails, and
// refuses to shut down while it has one; runc writes its log into the task's
// bundle, so once containerd has deleted the bundle (it gave up on the task) no
// delete can succeed and the shim would run forever. This happens when containerd
// gives up on a task create (its caller went away) while the shim still creates the
// task: containerd's delete finds no task yet, the create then finishes, and
// containerd drops the shim and its bundle. The bundle's path is the shim's working
// directory, which containerd renamed to ".<id>" before deleting it.
func withBundle(ctx context.Context, sock string, s shimProc, callErr error) (error, bool) {
	bundle := lostBundle(s.pid, s.id)
	if bundle == "" {
		return callErr, false
	}
	if err := os.Mkdir(bundle, 0o711); err != nil {
		return callErr, false
	}
	defer os.RemoveAll(bundle)
	log.G(ctx).WithField("bundle", bundle).WithError(callErr).Info("the shim's task cannot be deleted without its bundle, which containerd deleted: deleting it with the directory made again")
	again, exited, err := deleteAndShutdown(ctx, sock, s)
	if err != nil {
		return callErr, false
	}
	return again, exited
}

// lostBundle is the bundle directory of task id that the shim pid ran in, if
// containerd has deleted it; else "".
func lostBundle(pid int, id string) string {
	cwd, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "cwd"))
	if err != nil || !deletedBundle(cwd) {
		return ""
	}
	cwd = strings.TrimSuffix(cwd, " (deleted)")
	dir := filepath.Dir(cwd)
	if _, err := os.Stat(dir); err != nil {
		return "" // the namespace's directory of bundles is gone too
	}
	return filepath.Join(dir, id)
}

// stuckShim tells whether a shim that did not exit never served: its delete call
// got no answer in time and it has no child process (a shim that ran a container
// has its process, or had, and answers). A shim started while containerd went
// away can hang so in its start: it opens its log FIFO for writing, which blocks
// until a reader opens the other end, and the reader was containerd. The socket it
// was handed accepts connections, but nothing ever serves them, so only SIGKILL
// ends it.
func stuckShim(callErr error, pid int) bool {
	return errors.Is(callErr, context.DeadlineExceeded) && !hasChildren(pid)
}

// hasChildren tells whether process pid has a child process (any of its threads').
func hasChildren(pid int) bool {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return false
	}
	for _, t := range tasks {
		kids, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, t.Name()))
		if err == nil && len(bytes.TrimSpace(kids)) > 0 {
			return true
		}
	}
	return false
}

// waitExit waits until process pid has exited (or is a zombie) or ctx ends.
func waitExit(ctx context.Context, pid int) bool {
	for {
		if exited(pid) {
			return true
		}
		select {
		case <-ctx.Done():
			return exited(pid)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// exited tells whether process pid is gone or a zombie (its parent, init, may not reap).
func exited(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// pid (comm) state ...; comm may hold spaces and parentheses.
	rest := stat[bytes.LastIndexByte(stat, ')')+1:]
	f := strings.Fields(string(rest))
	return len(f) > 0 && f[0] == "Z"
}
