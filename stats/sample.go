package stats

import (
	"context"
	"fmt"
	"sync"
	"time"

	v1 "github.com/containerd/cgroups/v3/cgroup1/stats"
	v2 "github.com/containerd/cgroups/v3/cgroup2/stats"
	"github.com/containerd/typeurl/v2"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/ctrd"
)

// cgroupSample is what shimd reads of one task's cgroup (v1 or v2).
type cgroupSample struct {
	at                 time.Time
	cpuNanos           uint64
	memUsage, memWS    uint64
	memRSS, pageFaults uint64
	majorPageFaults    uint64
}

// cpuRates remembers the last CPU sample per task, so usage_nano_cores can be given.
type cpuRates struct {
	mu   sync.Mutex
	last map[string]cgroupSample
}

// rate returns nano cores used since the previous sample of id (0 on the first).
func (r *cpuRates) rate(id string, s cgroupSample) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.last == nil {
		r.last = map[string]cgroupSample{}
	}
	prev, ok := r.last[id]
	r.last[id] = s
	if !ok || !s.at.After(prev.at) || s.cpuNanos < prev.cpuNanos {
		return 0
	}
	return uint64(float64(s.cpuNanos-prev.cpuNanos) / float64(s.at.Sub(prev.at).Nanoseconds()) * 1e9)
}

func (r *cpuRates) forget(id string) {
	r.mu.Lock()
	delete(r.last, id)
	r.mu.Unlock()
}

// taskCgroupMetrics reads a task's cgroup metrics through containerd: a
// *v1.Metrics or a *v2.Metrics, and when they were read.
// WorkingSet is the memory a task holds and cannot give back (usage less inactive
// file pages).
func WorkingSet(ctx context.Context, cl ctrd.ContainerLoader, id string) (uint64, error) {
	smp, err := taskSample(ctx, cl, id)
	return smp.memWS, err
}

func taskCgroupMetrics(ctx context.Context, cl ctrd.ContainerLoader, id string) (any, time.Time, error) {
	_, task, err := ctrd.LoadTask(ctx, cl, id)
	if err != nil {
		return nil, time.Time{}, err
	}
	m, err := task.Metrics(ctx)
	if err != nil {
		return nil, time.Time{}, err
	}
	data, err := typeurl.UnmarshalAny(m.Data)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("decode metrics of %s: %w", id, err)
	}
	return data, m.Timestamp.AsTime(), nil
}

// taskSample reads a task's cgroup metrics through containerd (works for v1 and v2).
func taskSample(ctx context.Context, cl ctrd.ContainerLoader, id string) (cgroupSample, error) {
	data, at, err := taskCgroupMetrics(ctx, cl, id)
	if err != nil {
		return cgroupSample{}, err
	}
	out := cgroupSample{at: at}
	switch d := data.(type) {
	case *v1.Metrics:
		out.cpuNanos = d.GetCPU().GetUsage().GetTotal()
		mem := d.GetMemory()
		out.memUsage = mem.GetUsage().GetUsage()
		out.memWS = out.memUsage
		if inactive := mem.GetTotalInactiveFile(); inactive < out.memWS {
			out.memWS -= inactive
		}
		out.memRSS, out.pageFaults, out.majorPageFaults = mem.GetTotalRSS(), mem.GetTotalPgFault(), mem.GetTotalPgMajFault()
	case *v2.Metrics:
		out.cpuNanos = d.GetCPU().GetUsageUsec() * 1000
		mem := d.GetMemory()
		out.memUsage = mem.GetUsage()
		out.memWS = out.memUsage
		if inactive := mem.GetInactiveFile(); inactive < out.memWS {
			out.memWS -= inactive
		}
		out.memRSS, out.pageFaults, out.majorPageFaults = mem.GetAnon(), mem.GetPgfault(), mem.GetPgmajfault()
	default:
		return cgroupSample{}, fmt.Errorf("metrics of %s: unknown type %T", id, data)
	}
	return out, nil
}

func (s *Collector) cpuMem(id string, smp cgroupSample) (*runtimeapi.CpuUsage, *runtimeapi.MemoryUsage) {
	ts := smp.at.UnixNano()
	return &runtimeapi.CpuUsage{
			Timestamp:            ts,
			UsageCoreNanoSeconds: &runtimeapi.UInt64Value{Value: smp.cpuNanos},
			UsageNanoCores:       &runtimeapi.UInt64Value{Value: s.rates.rate(id, smp)},
		}, &runtimeapi.MemoryUsage{
			Timestamp:       ts,
			WorkingSetBytes: &runtimeapi.UInt64Value{Value: smp.memWS},
			UsageBytes:      &runtimeapi.UInt64Value{Value: smp.memUsage},
			RssBytes:        &runtimeapi.UInt64Value{Value: smp.memRSS},
			PageFaults:      &runtimeapi.UInt64Value{Value: smp.pageFaults},
			MajorPageFaults: &runtimeapi.UInt64Value{Value: smp.majorPageFaults},
		}
}

// containerStats gathers one container's stats; CPU and memory only while it runs.
// ContainerStats samples one container.
func (s *Collector) ContainerStats(ctx context.Context, c Container) *runtimeapi.ContainerStats {
	out := &runtimeapi.ContainerStats{Attributes: &runtimeapi.ContainerAttributes{
		Id: c.ID, Metadata: c.Metadata, Labels: c.Labels, Annotations: c.Annotations,
	}}
	now := time.Now().UnixNano()
	if c.Running {
		if smp, err := taskSample(ctx, s.opts.Client, c.ID); err == nil {
			out.Cpu, out.Memory = s.cpuMem(c.ID, smp)
		}
	}
	if out.Cpu == nil {
		out.Cpu = &runtimeapi.CpuUsage{Timestamp: now}
		out.Memory = &runtimeapi.MemoryUsage{Timestamp: now}
	}
	root, rootErr := s.opts.Images.SnapshotterRoot(ctx, c.Snapshotter)
	if u, err := s.opts.Client.SnapshotService(c.Snapshotter).Usage(ctx, c.ID); err == nil && rootErr == nil {
		out.WritableLayer = &runtimeapi.FilesystemUsage{
			Timestamp: now,
			// The kubelet stats this path to find the filesystem.
			FsId:       &runtimeapi.FilesystemIdentifier{Mountpoint: root},
			UsedBytes:  &runtimeapi.UInt64Value{Value: uint64(u.Size)},
			InodesUsed: &runtimeapi.UInt64Value{Value: uint64(u.Inodes)},
		}
	}
	return out
}
