package spec

// MinMemoryLimit is the smallest memory limit, in bytes, a container may ask for (0,
// unset, and -1, unlimited, aside). runc writes the limit after its init process has
// joined the container's cgroup, and the kernel refuses a limit below what that
// process already uses ("unable to set memory limit to 1 (current usage: 3330048,
// peak usage: 3571712)"). runc 1.5.2's init used 3.3-3.8 MB on the cgroup v1 host
// shimd is tested on: a 3 MiB limit failed 8 starts in 12, 3.5 MiB none in 12. 6 MiB,
// Docker's floor since 20.10, leaves room for other kernels and runc builds. CRI-O's
// default floor is 12 MiB; containerd has none and fails at start.
const MinMemoryLimit = 6 << 20

// CheckMemorySwap applies the kernel's and runc's rule to a memory limit and a
// memory+swap limit (CRI memory_swap_limit_in_bytes, cgroup v1's
// memory.memsw.limit_in_bytes; runc derives cgroup v2's memory.swap.max from it), as
// they are in effect: for an update, merged with the stored ones. 0 is unset, -1
// unlimited. A positive swap limit needs a positive memory limit no larger than it;
// on cgroup v1 an unlimited memory limit is larger than any. field prefixes the
// field names in the error.
func CheckMemorySwap(field string, limit, swap int64, unified bool) error {
	if swap <= 0 {
		return nil
	}
	f := field + ".memory_swap_limit_in_bytes"
	switch {
	case limit == 0:
		return invalid(f, "%d without memory_limit_in_bytes: the memory+swap limit needs a memory limit", swap)
	case limit < 0 && !unified:
		return invalid(f, "%d with an unlimited memory_limit_in_bytes: on cgroup v1 the memory+swap limit cannot be below the memory limit", swap)
	case limit > 0 && swap < limit:
		return invalid(f, "%d is below memory_limit_in_bytes %d: it limits memory plus swap", swap, limit)
	}
	return nil
}
