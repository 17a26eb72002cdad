package stats

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	tasksapi "github.com/containerd/containerd/api/services/tasks/v1"
	"github.com/containerd/containerd/api/types"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/continuity/fs"
	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
	"github.com/containerd/log"
	"github.com/containerd/typeurl/v2"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/pod"
)

// metricsPass is one list call's view of the tasks' cgroups. A runc task's files are
// read directly (direct.go). The others' metrics come from containerd, for every task
// at once, in one call made on the first need (containerd asks each shim in turn):
// each task is read once, for its container's figures and for its pod's sum. A nil
// pass is a call about one pod or container: each task is read on its own.
// A pass is shared by the goroutines of one list call (eachBounded).
type metricsPass struct {
	once sync.Once
	all  map[string]*types.Metric // nil: containerd's call failed; read one by one
}

// newPass starts a pass; containerd is asked only if some task needs it.
func (s *Collector) newPass() *metricsPass { return &metricsPass{} }

// metrics is containerd's metrics of task id from the pass: read for all tasks the
// first time. ok is false when that read failed (then ask for the task alone).
func (s *Collector) metrics(ctx context.Context, p *metricsPass, id string) (m *types.Metric, ok bool) {
	p.once.Do(func() {
		resp, err := s.opts.Client.TaskService().Metrics(ctx, &tasksapi.MetricsRequest{})
		if err != nil {
			log.G(ctx).WithError(errgrpc.ToNative(err)).Warn("stats: metrics of all tasks; reading one by one")
		} else {
			p.all = make(map[string]*types.Metric, len(resp.Metrics))
			for _, m := range resp.Metrics {
				p.all[m.ID] = m
			}
		}
	})
	if p.all == nil {
		return nil, false
	}
	return p.all[id], true
}

// sample reads task id's cgroup sample: directly when its runtime's cgroups are the
// host kernel's (direct), else from the pass when there is one, else from
// containerd. pid is the task's process (its own cgroup2 group, for pressure on a
// hybrid host and the swap file); 0 if unknown.
func (s *Collector) sample(ctx context.Context, p *metricsPass, id string, pid uint32, direct bool) (cgroupSample, error) {
	if direct && pid != 0 {
		smp, err := s.directSample(id, pid)
		if err == nil || !errors.Is(err, errNoDirect) {
			return smp, err
		}
		log.G(ctx).WithError(err).WithField("task", id).Debug("stats: reading through containerd")
	}
	if p == nil {
		return s.taskSample(ctx, id)
	}
	m, ok := s.metrics(ctx, p, id)
	if !ok {
		return s.taskSample(ctx, id)
	}
	if m == nil || m.Data == nil {
		return cgroupSample{}, fmt.Errorf("task %s: %w", id, errdefs.ErrNotFound)
	}
	data, err := typeurl.UnmarshalAny(m.Data)
	if err != nil {
		return cgroupSample{}, fmt.Errorf("decode metrics of %s: %w", id, err)
	}
	tm := taskMetrics{data: data, at: m.Timestamp.AsTime()}
	if pid != 0 {
		tm.group = s.host.ownGroup(pid)
	}
	return sampleOf(hostFacts(tm))
}

// directSample reads task id's cgroup files (direct.go).
func (s *Collector) directSample(id string, pid uint32) (cgroupSample, error) {
	d, err := s.dirsOf(id, pid)
	if err != nil {
		return cgroupSample{}, err
	}
	data, at, err := readDirect(d)
	if err != nil {
		s.groups.forget(id) // the process may be gone, or another in its place
		return cgroupSample{}, err
	}
	return sampleOf(hostFacts(taskMetrics{data: data, at: at, group: d.group}))
}

// ListPodStats is PodStats of each pod, with one metrics read for all tasks and one
// listing of the containers; the pods are sampled by a few goroutines (eachBounded).
func (s *Collector) ListPodStats(ctx context.Context, pods []pod.Pod) []*runtimeapi.PodSandboxStats {
	if len(pods) == 0 {
		return nil
	}
	p := s.newPass()
	byPod := map[string][]Container{}
	for _, c := range s.opts.Containers.StatsOf("") {
		byPod[c.SandboxID] = append(byPod[c.SandboxID], c)
	}
	out := make([]*runtimeapi.PodSandboxStats, len(pods))
	eachBounded(len(pods), func(i int) {
		out[i] = s.podStats(ctx, p, pods[i], byPod[pods[i].ID])
	})
	return out
}

// ListContainerStats is ContainerStats of each container, with one metrics read for
// all tasks, sampled by a few goroutines (eachBounded).
func (s *Collector) ListContainerStats(ctx context.Context, cs []Container) []*runtimeapi.ContainerStats {
	if len(cs) == 0 {
		return nil
	}
	p := s.newPass()
	out := make([]*runtimeapi.ContainerStats, len(cs))
	eachBounded(len(cs), func(i int) {
		out[i], _ = s.containerStats(ctx, p, cs[i])
	})
	return out
}

// A list call's samples are file reads (cgroup files, /proc/<pid>/net/dev), a few
// hundred microseconds per pod, all in the kernel. In series, 250 pods took 71 ms on
// a 16-core cgroup v2 host, where containerd's CRI plugin, one goroutine per pod,
// took 40 ms. eachBounded spreads them over one goroutine per CPU, at most
// maxListWorkers, with at least minItemsPerWorker items each, so that a call about a
// few pods stays on its own goroutine and a big node's call uses its cores without a
// goroutine per pod.
const (
	maxListWorkers    = 16
	minItemsPerWorker = 8
)

// eachBounded calls f(0..n-1), each once, from up to min(GOMAXPROCS, maxListWorkers,
// n/minItemsPerWorker) goroutines, and returns when all calls have.
func eachBounded(n int, f func(i int)) {
	workers := min(runtime.GOMAXPROCS(0), maxListWorkers, n/minItemsPerWorker)
	if workers <= 1 {
		for i := range n {
			f(i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				f(i)
				// Let the node's other calls in between: with every P busy
				// reading files, a status call that came meanwhile would wait
				// for the scheduler's 10 ms preemption. Status p99 at 250 pods
				// on 2 cores: 11-15 ms without this yield, 6-7 ms with it.
				runtime.Gosched()
			}
		}()
	}
	wg.Wait()
}

// layerUsageTTL is how old a writable layer's usage may be before it is measured
// again. The snapshotter walks the layer's files to measure it; the kubelet asks
// every 10 s, and containerd's CRI plugin refreshes its own figures in the background
// at that period. A stale figure is answered as it is while a new one is measured in
// the background, so an answer is at most about layerUsageTTL plus one measurement
// old, and a stats call waits only for layers it never measured.
const layerUsageTTL = 10 * time.Second

// layerUsage caches writable layers' usage by container id.
type layerUsage struct {
	mu   sync.Mutex
	byID map[string]*layerUsageEntry
}

type layerUsageEntry struct {
	at           time.Time
	size, inodes int64
	refreshing   bool
}

// writableLayer is the container's writable-layer usage (see layerUsageTTL).
func (s *Collector) writableLayer(ctx context.Context, c Container) (size, inodes int64, err error) {
	s.usage.mu.Lock()
	e, ok := s.usage.byID[c.ID]
	if ok {
		size, inodes = e.size, e.inodes
		if time.Since(e.at) >= layerUsageTTL && !e.refreshing {
			e.refreshing = true
			go s.measureLayer(context.WithoutCancel(ctx), c, true)
		}
	}
	s.usage.mu.Unlock()
	if ok {
		return size, inodes, nil
	}
	return s.measureLayer(ctx, c, false)
}

// measureLayer asks the snapshotter for the layer's usage and keeps it. A background
// refresh keeps it only if the entry is still there: the container may have been
// removed (Forget) meanwhile.
func (s *Collector) measureLayer(ctx context.Context, c Container, background bool) (size, inodes int64, err error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	at := time.Now()
	u, err := s.layerUsage(ctx, c)
	s.usage.mu.Lock()
	defer s.usage.mu.Unlock()
	e, ok := s.usage.byID[c.ID]
	if err != nil {
		if ok {
			e.refreshing = false
		}
		return 0, 0, err
	}
	if s.usage.byID == nil {
		s.usage.byID = map[string]*layerUsageEntry{}
	}
	if ok || !background {
		s.usage.byID[c.ID] = &layerUsageEntry{at: at, size: u.Size, inodes: u.Inodes}
	}
	return u.Size, u.Inodes, nil
}

func (l *layerUsage) forget(id string) {
	l.mu.Lock()
	delete(l.byID, id)
	l.mu.Unlock()
}

// layerUsage measures the container's writable layer: its own directory in split
// mode, else the snapshotter's layer.
func (s *Collector) layerUsage(ctx context.Context, c Container) (snapshots.Usage, error) {
	if c.WritableUpper != "" {
		u, err := fs.DiskUsage(ctx, c.WritableUpper)
		return snapshots.Usage{Size: u.Size, Inodes: u.Inodes}, err
	}
	return s.opts.Client.SnapshotService(c.Snapshotter).Usage(ctx, c.ID)
}

// layerRoot is a path on the filesystem of the container's writable layer.
func (s *Collector) layerRoot(ctx context.Context, c Container) (string, error) {
	if c.WritableFs != "" {
		return c.WritableFs, nil
	}
	return s.opts.Images.SnapshotterRoot(ctx, c.Snapshotter)
}
