package sandbox

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	taskv2 "github.com/containerd/containerd/api/runtime/task/v2"
	taskv3 "github.com/containerd/containerd/api/runtime/task/v3"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
	"github.com/containerd/log"
	"golang.org/x/sync/errgroup"

	"github.com/shimd/shimd/cleanup"
	"github.com/shimd/shimd/ctrd"
)

// Orphaned shims. containerd runs a shim process per pod (containers of a pod share
// the shim of its pause task, started with -id <sandbox id>). A crash of shimd or of
// containerd in the middle of a task's create or delete can leave a shim that no
// task of containerd's refers to: containerd forgot it (it died before recording
// the task) or the delete was cut short after the task went. Nobody would ever stop
// such a shim, so recovery does.
//
// Assumptions: a shim's command line is `containerd-shim-* -namespace NS -id ID
// -address ADDR ...`; its socket is the one containerd's pkg/shim derives from ADDR,
// NS and ID (the grouping id); ids of shimd's shims are sandbox or container ids.

// shims finds and stops the shims of shimd's namespace and containerd.
type shims struct {
	client *client.Client
	// address is containerd's socket: shims name it on their command line and derive
	// their sockets from it.
	address   string
	namespace string
}

// shimProc is a running shim of shimd's namespace and containerd.
type shimProc struct {
	pid int
	id  string
	// socketID is the grouping id its socket is named after ("" = id).
	socketID string
}

// shimGroup finds which of groups (socket name -> sandbox id) shim pid listens on.
func shimGroup(pid int, groups map[string]string) (string, bool) {
	table, inodes, err := socketTable(pid)
	if err != nil {
		return "", false
	}
	for _, line := range strings.Split(table, "\n")[1:] {
		if f := strings.Fields(line); len(f) >= 8 && inodes[f[6]] {
			if id, ok := groups[filepath.Base(f[7])]; ok {
				return id, true
			}
		}
	}
	return "", false
}

// findShims lists the shim processes of namespace ns serving the containerd at address.
func findShims(address, ns string) ([]shimProc, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var out []shimProc
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.HasPrefix([]byte(filepath.Base(string(bytes.SplitN(raw, []byte{0}, 2)[0]))), []byte("containerd-shim")) {
			continue
		}
		flags := shimFlags(strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")[1:])
		if flags["namespace"] == ns && flags["address"] == address && isID(flags["id"]) {
			out = append(out, shimProc{pid: pid, id: flags["id"]})
		}
	}
	return out, nil
}

// bundleGone reports whether the shim's working directory, its bundle, has been
// renamed for deletion (".<id>") or deleted.
func bundleGone(pid int) bool {
	cwd, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "cwd"))
	return err == nil && deletedBundle(cwd)
}

func deletedBundle(cwd string) bool {
	return strings.HasSuffix(cwd, " (deleted)") || strings.HasPrefix(filepath.Base(cwd), ".")
}

// shimFlags reads "-name value" pairs (Go flag syntax, one or two dashes).
func shimFlags(args []string) map[string]string {
	m := map[string]string{}
	for i := 0; i < len(args); i++ {
		name := strings.TrimLeft(args[i], "-")
		if name == args[i] {
			continue
		}
		if k, v, ok := strings.Cut(name, "="); ok {
			m[k] = v
		} else if i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
			m[name] = args[i+1]
			i++
		}
	}
	return m
}

// reapOrphans stops the shims that serve no task containerd knows: a shim is kept
// if containerd has a task it could serve (its own id, its pod's, or one of its pod's
// recorded containers'). Before shimd serves (live false) any other shim is a
// leftover of a crash. While it serves (live), a shim whose container record exists
// may be one a create in progress just started, and is kept too. Returns how many it
// stopped.
//
// Each shim's tasks are asked for by id, side by side, not read from containerd's
// task list: that list leaves out a task whose shim does not answer its state call
// within 2 s (a busy machine), so it is no proof, and containerd reads the states
// for it one task after another, 2 s for each task of a shim that does not answer.
func (sh shims) reapOrphans(ctx context.Context, live bool) (int, error) {
	shims, err := findShims(sh.address, sh.namespace)
	if err != nil || len(shims) == 0 {
		return 0, err
	}
	ctrs, err := sh.client.ContainerService().List(ctx)
	if err != nil {
		return 0, fmt.Errorf("list containers: %w", err)
	}
	sandboxOf, recorded := map[string]string{}, map[string]bool{}
	for _, c := range ctrs {
		sandboxOf[c.ID], recorded[c.ID] = c.Labels[LabelSandbox], true
	}
	// A pause-less pod's containers share a shim started with the -id of whichever
	// container came first, listening on the socket of the pod's id (runc's shim
	// groups by the sandbox-id annotation): it is the pod's shim, kept while any of
	// the pod's containers has a task, and reached on the pod's socket.
	groups := map[string]string{} // socket name -> sandbox id
	for _, c := range ctrs {
		sb := c.Labels[LabelSandbox]
		if c.Labels[LabelKind] == KindSandbox {
			sb = c.ID // a pod whose containers are all gone
		}
		if sb != "" {
			groups[shimSocketName(sh.address, sh.namespace, sb)] = sb
		}
	}
	var suspects []shimProc
	var taskIDs [][]string
	for _, s := range shims {
		group, grouped := shimGroup(s.pid, groups)
		if grouped {
			s.socketID = group
		}
		// While shimd serves, a shim of a recorded container or pod is work in
		// progress and left alone, unless containerd renamed its bundle to ".<id>" or
		// deleted it: a kill of containerd in the middle of a task's delete left it,
		// and the record's removal would not sweep again.
		if live && (recorded[s.id] || grouped && recorded[group]) && !bundleGone(s.pid) {
			continue
		}
		suspects = append(suspects, s)
		taskIDs = append(taskIDs, shimTaskIDs(s, group, grouped, sandboxOf))
	}
	// Only a NotFound for every task a suspect could serve counts; the suspects are
	// asked side by side, so that busy shims cost those 2 s once.
	kept := make([]string, len(suspects))
	var g errgroup.Group
	g.SetLimit(cleanup.RecoveryReads)
	for i := range suspects {
		g.Go(func() error {
			if id, ok := sh.anyTaskOf(ctx, taskIDs[i]); ok {
				kept[i] = id
			}
			return nil
		})
	}
	_ = g.Wait()
	n := 0
	for i, s := range suspects {
		ctx := log.WithLogger(ctx, log.G(ctx).WithField("shim", s.id).WithField("pid", s.pid))
		if kept[i] != "" {
			log.G(ctx).WithField("task", kept[i]).Debug("shim kept: containerd has a task it serves, or could not say")
			continue
		}
		if err := sh.stop(ctx, s); err != nil {
			log.G(ctx).WithError(err).Warn("stop orphaned shim")
			continue
		}
		log.G(ctx).Info("stopped orphaned shim")
		n++
	}
	return n, nil
}

// reapPod stops the shim of a pod being removed if it outlived the pod: the
// pause task is deleted, and containerd has deleted the shim's bundle (so it is done
// with the shim), yet the process runs. Seen in CI's one-node cluster: containerd's
// shutdown of a pod's shim is refused by a shim that still holds a task containerd no
// longer knows, and containerd then drops the shim all the same. Only a shim started
// for the pod's id whose bundle containerd deleted is touched; one that still runs a
// process is left, with a warning.
func (sh shims) reapPod(ctx context.Context, sb *Sandbox) {
	shims, err := findShims(sh.address, sh.namespace)
	if err != nil {
		return
	}
	for _, s := range shims {
		if s.id != sb.ID || exited(s.pid) || !bundleGone(s.pid) {
			continue
		}
		// A shim told to shut down with the pause task's delete may still be exiting.
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		gone := waitExit(wctx, s.pid)
		cancel()
		if gone {
			continue
		}
		ctx := log.WithLogger(ctx, log.G(ctx).WithField("shim", s.id).WithField("pid", s.pid))
		// stop kills one that does not exit and runs no process (its bundle is gone).
		if err := sh.stop(ctx, s); err != nil {
			log.G(ctx).WithError(err).Warn("the pod's shim outlived the pod and could not be stopped; left running")
		} else {
			log.G(ctx).Info("stopped the pod's shim, which outlived the pod")
		}
	}
}

// shimTaskIDs are the ids of the tasks shim s may serve: its own, and when it is a
// pod's shim, the pod's and those of every recorded container of the pod.
func shimTaskIDs(s shimProc, group string, grouped bool, sandboxOf map[string]string) []string {
	ids := []string{s.id}
	if grouped {
		ids = append(ids, group)
	}
	pod := group
	if !grouped {
		pod = cmp.Or(sandboxOf[s.id], s.id)
	}
	for id, sb := range sandboxOf {
		if sb == pod && id != s.id && id != pod {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids[1:])
	return ids
}

// anyTaskOf asks containerd for each task by id: the first that exists, or whose
// lookup failed other than with NotFound (then nobody can tell), is returned with
// true.
func (sh shims) anyTaskOf(ctx context.Context, ids []string) (string, bool) {
	ts := sh.client.TaskService()
	for _, id := range ids {
		if !ctrd.TaskGone(ctx, ts, id) {
			return id, true
		}
	}
	return "", false
}

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

// shimSocketName is the file name of a shim's task API socket: containerd's pkg/shim
// (CreateSocketAddress) names it sha256(<address>/<namespace>/<grouping id>), in a
// socket directory of containerd's configuration (/run/containerd/s by default). Its
// debug socket, in the same directory, is named after ".../debug".
func shimSocketName(address, ns, id string) string {
	return fmt.Sprintf("%x", sha256.Sum256([]byte(filepath.Join(address, ns, id))))
}

// listeningSocket finds the path of the unix socket named name that process pid
// listens on: the socket inodes among its descriptors, looked up in /proc/net/unix.
// This finds the socket directory, which shimd does not know.
func listeningSocket(pid int, name string) (string, error) {
	table, inodes, err := socketTable(pid)
	if err != nil {
		return "", err
	}
	return socketPathOf(table, inodes, name)
}

// socketTable reads process pid's /proc/net/unix and the socket inodes among its
// descriptors.
func socketTable(pid int) (string, map[string]bool, error) {
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return "", nil, err
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		link, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if ino, ok := strings.CutPrefix(link, "socket:["); ok {
			inodes[strings.TrimSuffix(ino, "]")] = true
		}
	}
	table, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/unix", pid))
	if err != nil {
		return "", nil, err
	}
	return string(table), inodes, nil
}

// socketPathOf picks, from a /proc/net/unix table, the path of the listening socket
// (flag __SO_ACCEPTCON) named name among inodes.
func socketPathOf(table string, inodes map[string]bool, name string) (string, error) {
	const acceptCon = 0x10000
	for _, line := range strings.Split(table, "\n")[1:] {
		// Num RefCount Protocol Flags Type St Inode Path
		f := strings.Fields(line)
		if len(f) < 8 || !inodes[f[6]] {
			continue
		}
		if flags, err := strconv.ParseUint(f[3], 16, 32); err == nil && flags&acceptCon != 0 && filepath.Base(f[7]) == name {
			return f[7], nil
		}
	}
	return "", errors.New("the shim listens on no unix socket")
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

// podSocket finds the socket of the shim that runs a pause-less pod's containers:
// the shim that listens on the pod's grouping socket (runc's shim groups a pod's
// containers by the sandbox-id annotation). The container package asks it for exits
// while containerd is away (container.Exits.Live).
func (sh shims) podSocket(id string) (string, error) {
	shims, err := findShims(sh.address, sh.namespace)
	if err != nil {
		return "", err
	}
	name := shimSocketName(sh.address, sh.namespace, id)
	for _, s := range shims {
		if _, ok := shimGroup(s.pid, map[string]string{name: id}); ok {
			return listeningSocket(s.pid, name)
		}
	}
	return "", fmt.Errorf("no shim of pod %s: %w", id, os.ErrNotExist)
}
