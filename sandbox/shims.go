package sandbox

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/containerd/v2/client"
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
