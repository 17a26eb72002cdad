package stats

import (
	"context"
	"fmt"
	"sync"
	"time"

	tasksapi "github.com/containerd/containerd/api/services/tasks/v1"
	"github.com/containerd/containerd/api/types"
	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
	"github.com/containerd/log"
	"github.com/containerd/typeurl/v2"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/pod"
)

// metricsPass holds the cgroup metrics of every task in shimd's namespace, read in
// one containerd call (containerd asks each shim in turn) for one list call: each
// task is read once, for its container's figures and for its pod's sum. nil: each
// task is read on its own (readTask), for calls about one pod or container.
type metricsPass map[string]*types.Metric

// newPass reads the metrics of every task. On an error it returns nil, and the
// caller falls back to one read per task.
func (s *Collector) newPass(ctx context.Context) metricsPass {
	resp, err := s.opts.Client.TaskService().Metrics(ctx, &tasksapi.MetricsRequest{})
	if err != nil {
		log.G(ctx).WithError(errgrpc.ToNative(err)).Warn("stats: metrics of all tasks; reading one by one")
		return nil
	}
	p := make(metricsPass, len(resp.Metrics))
	for _, m := range resp.Metrics {
		p[m.ID] = m
	}
	return p
}

// sample reads task id's cgroup sample: from the pass when there is one, else from
// containerd. pid is the task's process (its own cgroup2 group, for pressure on a
// hybrid host and the swap file); 0 if unknown.
func (s *Collector) sample(ctx context.Context, p metricsPass, id string, pid uint32) (cgroupSample, error) {
	if p == nil {
		return s.taskSample(ctx, id)
	}
	m, ok := p[id]
	if !ok || m.Data == nil {
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

// ListPodStats is PodStats of each pod, with one metrics read for all tasks and one
// listing of the containers.
func (s *Collector) ListPodStats(ctx context.Context, pods []pod.Pod) []*runtimeapi.PodSandboxStats {
	if len(pods) == 0 {
		return nil
	}
	p := s.newPass(ctx)
	byPod := map[string][]Container{}
	for _, c := range s.opts.Containers.StatsOf("") {
		byPod[c.SandboxID] = append(byPod[c.SandboxID], c)
	}
	out := make([]*runtimeapi.PodSandboxStats, 0, len(pods))
	for _, sb := range pods {
		out = append(out, s.podStats(ctx, p, sb, byPod[sb.ID]))
	}
	return out
}

// ListContainerStats is ContainerStats of each container, with one metrics read for
// all tasks.
func (s *Collector) ListContainerStats(ctx context.Context, cs []Container) []*runtimeapi.ContainerStats {
	if len(cs) == 0 {
		return nil
	}
	p := s.newPass(ctx)
	out := make([]*runtimeapi.ContainerStats, 0, len(cs))
	for _, c := range cs {
		st, _ := s.containerStats(ctx, p, c)
		out = append(out, st)
	}
	return out
}

// layerUsageTTL is how old a writable layer's usage may be. The snapshotter walks
// the layer's files to measure it; the kubelet asks every 10 s, and containerd's CRI
// plugin refreshes its own figures in the background at that period.
const layerUsageTTL = 10 * time.Second

// layerUsage caches writable layers' usage by container id.
type layerUsage struct {
	mu   sync.Mutex
	byID map[string]layerUsageEntry
}

type layerUsageEntry struct {
	at           time.Time
	size, inodes int64
}

// writableLayer is the container's writable-layer usage, measured at most
// layerUsageTTL ago.
func (s *Collector) writableLayer(ctx context.Context, c Container) (size, inodes int64, err error) {
	now := time.Now()
	s.usage.mu.Lock()
	e, ok := s.usage.byID[c.ID]
	s.usage.mu.Unlock()
	if ok && now.Sub(e.at) < layerUsageTTL {
		return e.size, e.inodes, nil
	}
	u, err := s.opts.Client.SnapshotService(c.Snapshotter).Usage(ctx, c.ID)
	if err != nil {
		return 0, 0, err
	}
	s.usage.mu.Lock()
	if s.usage.byID == nil {
		s.usage.byID = map[string]layerUsageEntry{}
	}
	s.usage.byID[c.ID] = layerUsageEntry{at: now, size: u.Size, inodes: u.Inodes}
	s.usage.mu.Unlock()
	return u.Size, u.Inodes, nil
}

func (l *layerUsage) forget(id string) {
	l.mu.Lock()
	delete(l.byID, id)
	l.mu.Unlock()
}
