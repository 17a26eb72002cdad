package spec

import (
	"encoding/json"
	"fmt"
	"maps"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/protobuf/types/known/anypb"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Resources converts the resources of an UpdateContainerResources request to the OCI
// form that a task update applies: CPU, memory and unified keys. Fields that are zero
// (or negative, where that is meaningless) stay unset, so the update leaves them as
// they are. Hugepage limits are left out: the update cannot tell whether the node has
// the hugetlb controller. minOOMScoreAdj is unused: oom_score_adj belongs to the
// process and runc cannot change it after start.
func Resources(r *runtimeapi.LinuxContainerResources, minOOMScoreAdj int) *specs.LinuxResources {
	_ = minOOMScoreAdj
	if r == nil {
		return &specs.LinuxResources{}
	}
	clean := &runtimeapi.LinuxContainerResources{
		CpuPeriod: max(r.GetCpuPeriod(), 0), CpuQuota: r.GetCpuQuota(), CpuShares: max(r.GetCpuShares(), 0),
		CpusetCpus: r.GetCpusetCpus(), CpusetMems: r.GetCpusetMems(),
		MemoryLimitInBytes: r.GetMemoryLimitInBytes(), MemorySwapLimitInBytes: r.GetMemorySwapLimitInBytes(),
	}
	out := &specs.LinuxResources{CPU: linuxCPU(clean), Memory: linuxMemory(clean)}
	if len(r.GetUnified()) > 0 {
		out.Unified = maps.Clone(r.GetUnified())
	}
	return out
}

// UpdateResources records an update in the container's stored spec: the fields set
// in linux replace the stored ones, the others are kept (as containerd's CRI plugin
// does). It changes rec.Spec only. An update that sets a memory or swap limit is
// refused (InvalidArgument, "linux.memory_swap_limit_in_bytes") when the limits in
// effect afterwards break CheckMemorySwap: a swap limit given alone is held against
// the stored memory limit. unified: the node runs cgroup v2.
func UpdateResources(rec *containers.Container, linux *specs.LinuxResources, unified bool) error {
	if rec.Spec == nil {
		return fmt.Errorf("container %s has no spec: %w", rec.ID, errdefs.ErrFailedPrecondition)
	}
	var s specs.Spec
	if err := json.Unmarshal(rec.Spec.GetValue(), &s); err != nil {
		return fmt.Errorf("decode spec of container %s: %w", rec.ID, err)
	}
	if s.Linux == nil {
		s.Linux = &specs.Linux{}
	}
	if s.Linux.Resources == nil {
		s.Linux.Resources = &specs.LinuxResources{}
	}
	mergeResources(s.Linux.Resources, linux)
	if m := linux.Memory; m != nil && (m.Limit != nil || m.Swap != nil) {
		merged := s.Linux.Resources.Memory
		if err := CheckMemorySwap("linux", deref(merged.Limit), deref(merged.Swap), unified); err != nil {
			return err
		}
	}
	data, err := json.Marshal(&s)
	if err != nil {
		return fmt.Errorf("encode spec of container %s: %w", rec.ID, err)
	}
	rec.Spec = &anypb.Any{TypeUrl: rec.Spec.GetTypeUrl(), Value: data}
	return nil
}

func mergeResources(dst, src *specs.LinuxResources) {
	if c := src.CPU; c != nil {
		if dst.CPU == nil {
			dst.CPU = &specs.LinuxCPU{}
		}
		dst.CPU.Period = firstSet(c.Period, dst.CPU.Period)
		dst.CPU.Quota = firstSet(c.Quota, dst.CPU.Quota)
		dst.CPU.Shares = firstSet(c.Shares, dst.CPU.Shares)
		if c.Cpus != "" {
			dst.CPU.Cpus = c.Cpus
		}
		if c.Mems != "" {
			dst.CPU.Mems = c.Mems
		}
	}
	if m := src.Memory; m != nil {
		if dst.Memory == nil {
			dst.Memory = &specs.LinuxMemory{}
		}
		dst.Memory.Limit = firstSet(m.Limit, dst.Memory.Limit)
		dst.Memory.Swap = firstSet(m.Swap, dst.Memory.Swap)
	}
	if len(src.Unified) > 0 {
		if dst.Unified == nil {
			dst.Unified = map[string]string{}
		}
		maps.Copy(dst.Unified, src.Unified)
	}
}

func deref(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

func firstSet[T any](a, b *T) *T {
	if a != nil {
		return a
	}
	return b
}
