#!/bin/bash
# Runs the burst and density benchmarks (critest/bench) on a host prepared by
# nothing but this script: the many-core cgroup v2 machine, which has no Go, iproute2,
# systemd or network. Run it as root from the repository root, with .manycore/ made by
# hack/manycore/bundle.sh. Logs go to $OUT (default /tmp/manycore-out).
# MC_BURST (default 100,200), MC_BURST_ROUNDS (2), MC_POLL (250), MC_POLL_WINDOW (60s),
# MC_BURST_ALWAYS (100: a burst with pause = "always"), MC_TIMEOUT (seconds each
# benchmark may run, 300), MC_DEADLINE (seconds after the script's start by which every
# benchmark must have ended, so that a device lease's command returns its logs; none by
# default), MC_PULL_CASES (PULL_CASES, default all three), MC_PULL (empty: skipped; else PULL_ROUNDS for
# BenchmarkPullScale, whose images are built there from the host's /usr; MC_PULL_SLOW_MIBS
# its slow link, MC_PULL_STALL=0 leaves out its stalled blob). An MC_BURST,
# MC_POLL or MC_BURST_ALWAYS set empty skips that benchmark. MC_DENSITY (empty:
# skipped; else BENCH_DENSITY_PODS) runs BenchmarkKubeletDensity once per pause mode
# in MC_DENSITY_PAUSE (default "when-needed,always"), with MC_DENSITY_STEADY_S (60) of
# steady state; it needs .manycore-k8s/ (bundle.sh with MC_K8S=1), which may have
# come in an earlier call to the same warm machine.
set -u
OUT=${OUT:-/tmp/manycore-out}; mkdir -p "$OUT"
B=$PWD/.manycore; W=/tmp/shimd-manycore
rm -rf "$W"; mkdir -p "$W"
if command -v xz >/dev/null; then xz -dc "$B/bundle.tar.xz"; else "$B/busybox" xz -dc "$B/bundle.tar.xz"; fi | tar -C "$W" -xf - || exit 1
mkdir -p "$W/tools/bin" /usr/lib/cni
cp "$W"/bin/* "$W/tools/bin/"
for p in "$W"/cni/*; do [ -e "/usr/lib/cni/${p##*/}" ] || cp "$p" /usr/lib/cni/; done
[ -e /usr/bin/docker-registry ] || cp "$W/docker-registry" /usr/bin/docker-registry
export SHIMD_TOOLS=$W/tools SHIMD_BIN=$W/shimd SHIMD_REGISTRY_STORAGE=$W/reg SHIMD_IMAGES_PREBUILT=1
{
	echo "commit $(cat "$W/commit"), $(date -u +%FT%TZ)"
	echo "host: kernel $(uname -r), $(nproc) cores, $(awk '/MemTotal/ {print int($2/1048576) " GiB"}' /proc/meminfo), /sys/fs/cgroup is $(stat -fc %T /sys/fs/cgroup), PID 1: $(cat /proc/1/comm)"
	grep -m1 'model name' /proc/cpuinfo
	"$W/tools/bin/containerd" --version; "$W/tools/bin/runc" --version | head -1
} >"$OUT/host.txt" 2>&1
cat "$OUT/host.txt"
bench() { # name, -bench regexp, env...
	local name=$1 re=$2; shift 2
	local limit=${MC_TIMEOUT:-300}
	if [ -n "${MC_DEADLINE-}" ]; then
		local left=$((MC_DEADLINE - SECONDS - 15))
		if [ "$left" -lt 30 ]; then
			echo "== $name: skipped, ${left}s left before MC_DEADLINE"
			return
		fi
		[ "$left" -lt "$limit" ] && limit=$left
	fi
	echo "== $name: $* (at most ${limit}s)"
	env "$@" timeout -k 10 "$limit" "$W/bench.test" -test.run '^$' -test.bench "$re" -test.benchtime 1x -test.v -test.timeout 30m >"$OUT/$name.log" 2>&1
	echo "== $name: rc=$? in ${SECONDS}s total"
	grep -E "${SHOW:-^(burst|polling|shimd|containerd|---|ok|FAIL|PASS)|ratio|x\$}" "$OUT/$name.log" | head -80
}
if [ -n "${MC_BURST-100,200}" ]; then
	bench burst Burst BENCH_BURST_PODS="${MC_BURST-100,200}" BENCH_BURST_ROUNDS="${MC_BURST_ROUNDS:-2}"
fi
if [ -n "${MC_BURST_ALWAYS-100}" ]; then
	bench burst-always Burst BENCH_PAUSE=always BENCH_BURST_PODS="${MC_BURST_ALWAYS-100}" BENCH_BURST_ROUNDS="${MC_BURST_ROUNDS:-2}"
fi
if [ -n "${MC_POLL-250}" ]; then
	bench poll Polling POLL_PODS="${MC_POLL-250}" POLL_WINDOW="${MC_POLL_WINDOW:-60s}"
fi
if [ -n "${MC_DENSITY-}" ]; then
	# The cluster's binaries, and their tail if bundle.sh split them.
	parts=(.manycore-k8s/k8s.tar.xz)
	[ -e "$B/k8s.tar.xz.tail" ] && parts+=("$B/k8s.tar.xz.tail")
	if ! (set -o pipefail; cat "${parts[@]}" |
		if command -v xz >/dev/null; then xz -dc; else "$B/busybox" xz -dc; fi | tar -C "$W/tools/bin" -xf -); then
		echo "== density: skipped, .manycore-k8s/k8s.tar.xz missing or cut short (bundle.sh with MC_K8S=1)"
	else
		# cAdvisor's OOM watcher, which the kubelet will not start without, reads
		# /dev/kmsg; a host without it gets the console, as kind's nodes do.
		[ -e /dev/kmsg ] || { ln -s /dev/console /dev/kmsg && echo "/dev/kmsg: linked to /dev/console"; }
		IFS=, read -ra modes <<<"${MC_DENSITY_PAUSE-when-needed,always}"
		for m in "${modes[@]}"; do
			SHOW='^(--- |ok|FAIL|PASS)|sli_duration|SLI, each|steady CPU|RSS|delete all|all [0-9]+ replicas' \
				bench "density-$m" KubeletDensity BENCH_PAUSE="$m" BENCH_DENSITY_PODS="$MC_DENSITY" BENCH_DENSITY_STEADY_S="${MC_DENSITY_STEADY_S:-60}"
		done
	fi
fi
if [ -n "${MC_PULL-}" ]; then
	bench pull PullScale PULL_ROUNDS="$MC_PULL" PULL_CACHE=/tmp/shimd-pull-cache PULL_SLOW_MIBS="${MC_PULL_SLOW_MIBS:-25}" PULL_STALL="${MC_PULL_STALL:-1}" PULL_CASES="${MC_PULL_CASES-}"
fi
