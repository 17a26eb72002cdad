package runtime

import (
	"fmt"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/container"
	"github.com/shimd/shimd/spec"
)

// Limits of the cgroup v1 files runc writes; outside them the kernel or runc refuses.
const (
	minCPUPeriod = 1000    // µs, cpu.cfs_period_us
	maxCPUPeriod = 1000000 // µs
	minCPUQuota  = 1000    // µs, cpu.cfs_quota_us (-1: unlimited)
	minCPUShares = 2
	maxCPUShares = 262144
)

// validateResourceValues checks what does not depend on the node: signs and ranges,
// and the unified (cgroup v2) keys and values (spec.CheckUnified). Zero means "not
// set" everywhere; -1 is "unlimited" for the quota and memory limits. RunPodSandbox
// and UpdatePodSandboxResources use it for the pod-level resources, CreateContainer
// and UpdateContainerResources through validateResources.
func validateResourceValues(field string, r *runtimeapi.LinuxContainerResources) error {
	if r == nil {
		return nil
	}
	switch p := r.GetCpuPeriod(); {
	case p != 0 && (p < minCPUPeriod || p > maxCPUPeriod):
		return invalid(field+".cpu_period", "%d is outside [%d, %d]", p, minCPUPeriod, maxCPUPeriod)
	}
	switch q := r.GetCpuQuota(); {
	case q != 0 && q != -1 && q < minCPUQuota:
		return invalid(field+".cpu_quota", "%d is neither -1 (unlimited) nor at least %d", q, minCPUQuota)
	}
	switch sh := r.GetCpuShares(); {
	case sh != 0 && (sh < minCPUShares || sh > maxCPUShares):
		return invalid(field+".cpu_shares", "%d is outside [%d, %d]", sh, minCPUShares, maxCPUShares)
	}
	for name, v := range map[string]int64{"memory_limit_in_bytes": r.GetMemoryLimitInBytes(), "memory_swap_limit_in_bytes": r.GetMemorySwapLimitInBytes()} {
		if v < -1 {
			return invalid(field+"."+name, "%d is negative", v)
		}
	}
	if adj := r.GetOomScoreAdj(); adj < -1000 || adj > 1000 {
		return invalid(field+".oom_score_adj", "%d is outside [-1000, 1000]", adj)
	}
	for i, h := range r.GetHugepageLimits() {
		if ps := h.GetPageSize(); ps == "" || strings.ContainsAny(ps, "/\x00.") {
			return invalid(fmt.Sprintf("%s.hugepage_limits[%d].page_size", field, i), "%s is not a page size", quote(ps))
		}
	}
	return spec.CheckUnified(field+".unified", r.GetUnified())
}

// validateResources checks a container's resources for this node, at create and at
// update: a memory limit runc can set (spec.MinMemoryLimit), cpusets that name online
// CPUs and memory nodes, and unified (cgroup v2) keys only on a cgroup v2 host.
func validateResources(field string, r *runtimeapi.LinuxContainerResources, node container.NodeInfo) error {
	if err := validateResourceValues(field, r); err != nil {
		return err
	}
	if m := r.GetMemoryLimitInBytes(); m > 0 && m < spec.MinMemoryLimit {
		return invalid(field+".memory_limit_in_bytes", "%d is below the minimum of %d bytes (6 MiB): runc cannot start a container under it", m, spec.MinMemoryLimit)
	}
	if len(r.GetUnified()) > 0 && !node.UnifiedCgroups {
		return invalid(field+".unified", "cgroup v2 settings on a cgroup v1 node")
	}
	for name, set := range map[string][2]string{
		"cpuset_cpus": {r.GetCpusetCpus(), node.CPUs}, "cpuset_mems": {r.GetCpusetMems(), node.MemoryNodes},
	} {
		if set[0] == "" {
			continue
		}
		want, err := parseCPUSet(set[0])
		if err != nil {
			return invalid(field+"."+name, "%s: %v", quote(set[0]), err)
		}
		have, err := parseCPUSet(set[1])
		if err == nil && !cpuSetWithin(want, have) {
			return invalid(field+"."+name, "%s is not within the node's %s", quote(set[0]), set[1])
		}
	}
	return nil
}

// validateContainerResources adds the rule that needs the whole request at create: a
// memory+swap limit needs a memory limit at most it (spec.CheckMemorySwap). An update
// is held to it after merging with the stored limits (spec.UpdateResources).
func validateContainerResources(field string, r *runtimeapi.LinuxContainerResources, node container.NodeInfo) error {
	if err := validateResources(field, r, node); err != nil {
		return err
	}
	return spec.CheckMemorySwap(field, r.GetMemoryLimitInBytes(), r.GetMemorySwapLimitInBytes(), node.UnifiedCgroups)
}
