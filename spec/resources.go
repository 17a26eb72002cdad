package spec

import (
	"maps"

	"github.com/containerd/containerd/v2/pkg/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const resField = "config.linux.resources"

// resourceOpts sets the cgroup limits, oom_score_adj and cgroup path. A zero field
// means "not set", as in CRI.
func resourceOpts(in Input) ([]oci.SpecOpts, error) {
	var opts []oci.SpecOpts
	if in.CgroupsPath != "" {
		opts = append(opts, oci.WithCgroup(in.CgroupsPath))
	}
	r := in.Config.GetLinux().GetResources()
	if r == nil {
		return opts, nil
	}
	if err := validResources(r); err != nil {
		return nil, err
	}
	adj := max(int(r.GetOomScoreAdj()), in.MinOOMScoreAdj)
	cpu, mem := linuxCPU(r), linuxMemory(r)
	var hugepages []specs.LinuxHugepageLimit
	if in.HugetlbController {
		for _, h := range r.GetHugepageLimits() {
			hugepages = append(hugepages, specs.LinuxHugepageLimit{Pagesize: h.GetPageSize(), Limit: h.GetLimit()})
		}
	}
	return append(opts, optFunc(func(s *specs.Spec) {
		s.Process.OOMScoreAdj = &adj
		res := s.Linux.Resources
		res.CPU, res.Memory, res.HugepageLimits = cpu, mem, hugepages
		if len(r.GetUnified()) > 0 {
			res.Unified = maps.Clone(r.GetUnified())
		}
	})), nil
}

func validResources(r *runtimeapi.LinuxContainerResources) error {
	switch {
	case r.GetCpuPeriod() < 0:
		return invalid(resField+".cpu_period", "negative: %d", r.GetCpuPeriod())
	case r.GetCpuShares() < 0:
		return invalid(resField+".cpu_shares", "negative: %d", r.GetCpuShares())
	case r.GetOomScoreAdj() < -1000 || r.GetOomScoreAdj() > 1000:
		return invalid(resField+".oom_score_adj", "%d is outside [-1000, 1000]", r.GetOomScoreAdj())
	}
	return CheckUnified(resField+".unified", r.GetUnified())
}

func linuxCPU(r *runtimeapi.LinuxContainerResources) *specs.LinuxCPU {
	c := &specs.LinuxCPU{Cpus: r.GetCpusetCpus(), Mems: r.GetCpusetMems()}
	if v := uint64(r.GetCpuPeriod()); v != 0 {
		c.Period = &v
	}
	if v := r.GetCpuQuota(); v != 0 {
		c.Quota = &v
	}
	if v := uint64(r.GetCpuShares()); v != 0 {
		c.Shares = &v
	}
	return c
}

// linuxMemory sets the limit and the swap limit (memory+swap on cgroup v1) only as
// given: the kubelet computes the swap limit itself. containerd also copies the memory
// limit into the swap limit when the config leaves it 0 and the host accounts swap;
// that needs a host probe, and a pure builder does not guess.
func linuxMemory(r *runtimeapi.LinuxContainerResources) *specs.LinuxMemory {
	m := &specs.LinuxMemory{}
	if v := r.GetMemoryLimitInBytes(); v != 0 {
		m.Limit = &v
	}
	if v := r.GetMemorySwapLimitInBytes(); v != 0 {
		m.Swap = &v
	}
	return m
}
