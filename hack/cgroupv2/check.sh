#!/bin/bash
# Checks shimd on a cgroup v2 host without systemd, with crictl: stats (PSI, io,
# swap, pids), the kubelet's unified keys, a user-namespace pod on the node's network
# with an id-mapped image volume, a stop signal, and the cgroup driver check.
# Usage: check.sh BUNDLE_DIR REPORT (BUNDLE_DIR: containerd, containerd-shim-runc-v2,
# runc, ctr, crictl, shimd, cni/{bridge,host-local,loopback}, bb.tar from mkimage.py).
set -u
B=$(cd "$1" && pwd); R=$2
W=/tmp/shimd-v2; rm -rf "$W"; mkdir -p "$W"/c "$W"/net.d
export PATH=$B:$PATH
say() { echo "== $*" >>"$R"; }
run() { echo "\$ $*" >>"$R"; "$@" >>"$R" 2>&1; echo "(rc=$?)" >>"$R"; }
: >"$R"
say "host: $(uname -r), $(nproc) cores, /sys/fs/cgroup is $(stat -fc %T /sys/fs/cgroup); controllers: $(cat /sys/fs/cgroup/cgroup.controllers); PID 1: $(cat /proc/1/comm)"
cat >"$W/c/config.toml" <<EOF
version = 3
root = "$W/c/root"
state = "$W/c/state"
imports = []
disabled_plugins = ["io.containerd.nri.v1.nri", "io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime", "io.containerd.cri.v1.images", "io.containerd.podsandbox.controller.v1.podsandbox"]
[grpc]
  address = "$W/c/containerd.sock"
[ttrpc]
  address = "$W/c/containerd.sock.ttrpc"
[plugins]
  [plugins.'io.containerd.shim.v1.manager']
    socket_dir = "$W/c/s"
EOF
containerd --config "$W/c/config.toml" >"$W/containerd.log" 2>&1 &
CPID=$!
for i in $(seq 50); do [ -S "$W/c/containerd.sock" ] && break; sleep 0.2; done
run ctr -a "$W/c/containerd.sock" -n shimd images import "$B/bb.tar"
cat >"$W/net.d/10-v2.conflist" <<EOF
{"cniVersion": "1.0.0", "name": "v2", "plugins": [
 {"type": "bridge", "bridge": "shimdv2", "isGateway": true, "ipMasq": false,
  "ipam": {"type": "host-local", "ranges": [[{"subnet": "198.18.7.0/24"}]], "dataDir": "$W/ipam"}},
 {"type": "loopback"}]}
EOF
cat >"$W/shimd.toml" <<EOF
socket = "$W/shimd.sock"
root_dir = "$W/root"
state_dir = "$W/state"
[containerd]
address = "$W/c/containerd.sock"
namespace = "shimd"
[cni]
conf_dir = "$W/net.d"
bin_dirs = ["$B/cni"]
cache_dir = "$W/cni-cache"
[nri]
socket_path = "$W/nri.sock"
plugin_path = "$W/nri-plugins"
plugin_config_path = "$W/nri-conf"
[cdi]
spec_dirs = ["$W/cdi"]
[runtimes.runc]
type = "io.containerd.runc.v2"
binary_name = "$B/runc"
EOF
shimd --config "$W/shimd.toml" >"$W/shimd.log" 2>&1 &
SPID=$!
C="crictl -r unix://$W/shimd.sock -i unix://$W/shimd.sock -t 60s"
for i in $(seq 100); do $C version >/dev/null 2>&1 && $C pods >/dev/null 2>&1 && break; sleep 0.2; done
run $C version
say "RuntimeConfig and features"
run $C info
cat >"$W/pod.json" <<EOF
{"metadata": {"name": "v2", "namespace": "v2", "uid": "v2-1"}, "log_directory": "$W/logs",
 "linux": {"cgroup_parent": "/shimdv2pod"}}
EOF
cat >"$W/busy.json" <<EOF
{"metadata": {"name": "busy"}, "image": {"image": "docker.io/library/busybox:latest"}, "log_path": "busy.log",
 "command": ["sh", "-c", "while :; do :; done & while :; do :; done & dd if=/dev/zero of=/tmp/f bs=1M count=64 conv=fsync; echo wrote; while :; do sleep 1; done"],
 "linux": {"resources": {"memory_limit_in_bytes": 268435456, "cpu_quota": 50000, "cpu_period": 100000,
   "unified": {"memory.oom.group": "1", "memory.high": "201326592"}}}}
EOF
P=$($C runp "$W/pod.json"); CID=$($C create "$P" "$W/busy.json" "$W/pod.json"); $C start "$CID" >/dev/null
sleep 8
say "ContainerStats and PodSandboxStats of a busy container (two CPU loops under a 0.5 CPU quota, 64 MiB written)"
run $C stats -o json "$CID"
run $C statsp -o json "$P"
CG=$(find /sys/fs/cgroup -type d -name "*$CID*" | head -1)
say "its cgroup $CG: the kubelet's unified keys"
for f in memory.oom.group memory.high memory.max cpu.max pids.current; do echo "$f: $(cat "$CG/$f" 2>&1)" >>"$R"; done
run $C stopp "$P"; run $C rmp "$P"

say "user namespace pod on the node's network, with an id-mapped image volume"
cat >"$W/upod.json" <<EOF
{"metadata": {"name": "u", "namespace": "v2", "uid": "v2-2"}, "log_directory": "$W/logs",
 "linux": {"security_context": {"namespace_options": {"network": 2, "pid": 1,
   "userns_options": {"mode": 0, "uids": [{"host_id": 300000, "container_id": 0, "length": 65536}], "gids": [{"host_id": 300000, "container_id": 0, "length": 65536}]}}}}}
EOF
cat >"$W/uctr.json" <<EOF
{"metadata": {"name": "u"}, "image": {"image": "docker.io/library/busybox:latest"}, "log_path": "u.log",
 "command": ["sh", "-c", "echo uid_map \$(cat /proc/self/uid_map); echo volowner \$(stat -c %u /vol/bin/busybox); echo net \$(readlink /proc/self/ns/net); echo hostnet \$HOSTNET; echo timer_list_mounts \$(grep -c ' /proc/timer_list ' /proc/self/mountinfo); sleep 3600"],
 "envs": [{"key": "HOSTNET", "value": "$(readlink /proc/self/ns/net)"}],
 "mounts": [{"container_path": "/vol", "readonly": true, "image": {"image": "docker.io/library/busybox:latest"}}],
 "linux": {"security_context": {"namespace_options": {"network": 2, "pid": 1,
   "userns_options": {"mode": 0, "uids": [{"host_id": 300000, "container_id": 0, "length": 65536}], "gids": [{"host_id": 300000, "container_id": 0, "length": 65536}]}}}}}
EOF
UP=$($C runp "$W/upod.json" 2>>"$R"); UC=$($C create "$UP" "$W/uctr.json" "$W/upod.json" 2>>"$R"); $C start "$UC" >>"$R" 2>&1
sleep 2; run $C logs "$UC"; run $C stopp "$UP"; run $C rmp "$UP"

say "stop signal SIGUSR1 (enum 29) with a 30 s grace period"
cat >"$W/sig.json" <<EOF
{"metadata": {"name": "sig"}, "image": {"image": "docker.io/library/busybox:latest"}, "log_path": "sig.log", "stop_signal": 29,
 "command": ["sh", "-c", "trap 'echo got-usr1; exit 0' USR1; trap '' TERM; while :; do sleep 0.2; done"]}
EOF
SP=$($C runp "$W/pod.json"); SC=$($C create "$SP" "$W/sig.json" "$W/pod.json"); $C start "$SC" >/dev/null; sleep 1
run bash -c "$C inspect $SC | grep -i stopSignal"
T0=$(date +%s.%N); run $C stop -t 30 "$SC"; echo "stopped in $(awk -v a="$T0" -v b="$(date +%s.%N)" "BEGIN{print b-a}") s" >>"$R"
run $C logs "$SC"; run $C inspect -o go-template --template '{{.status.exitCode}}' "$SC"
run $C stopp "$SP"; run $C rmp "$SP"

say "the smallest memory limit shimd accepts (6 MiB) starts a container, 5 times; 1 byte is refused"
MP=$($C runp "$W/pod.json")
for i in 1 2 3 4 5; do
  cat >"$W/mem$i.json" <<EOF
{"metadata": {"name": "mem$i"}, "image": {"image": "docker.io/library/busybox:latest"}, "log_path": "mem$i.log",
 "command": ["sh", "-c", "echo started"], "linux": {"resources": {"memory_limit_in_bytes": 6291456}}}
EOF
  MC=$($C create "$MP" "$W/mem$i.json" "$W/pod.json") && $C start "$MC" >/dev/null 2>&1; sleep 0.5
  echo "6 MiB try $i: $($C inspect -o go-template --template '{{.status.state}} exit {{.status.exitCode}} {{.status.reason}}' "$MC" 2>/dev/null)" >>"$R"
done
sed 's/6291456/1/; s/mem5/mem0/' "$W/mem5.json" >"$W/mem0.json"
run $C create "$MP" "$W/mem0.json" "$W/pod.json"
run $C stopp "$MP"; run $C rmp "$MP"

say "checkpoint and restore: $(criu --version 2>&1 | head -1)"
if criu check >>"$R" 2>&1; then
  cat >"$W/count.json" <<EOF
{"metadata": {"name": "count"}, "image": {"image": "docker.io/library/busybox:latest"}, "log_path": "count.log",
 "command": ["sh", "-c", "i=0; while :; do i=\$((i+1)); echo n=\$i; echo \$i > /count; sleep 0.1; done"]}
EOF
  KP=$($C runp "$W/pod.json"); KC=$($C create "$KP" "$W/count.json" "$W/pod.json"); $C start "$KC" >/dev/null; sleep 3
  T0=$(date +%s.%N); run $C checkpoint --export="$W/count.tar" "$KC"
  echo "checkpoint took $(awk -v a="$T0" -v b="$(date +%s.%N)" "BEGIN{print b-a}") s; archive $(stat -c %s "$W/count.tar") bytes" >>"$R"
  echo "/count in the archive's rootfs-diff.tar: $(tar -xOf "$W/count.tar" rootfs-diff.tar | tar -xO count)" >>"$R"
  sed 's/"name": "v2", "namespace": "v2", "uid": "v2-1"/"name": "v2r", "namespace": "v2", "uid": "v2-9"/' "$W/pod.json" >"$W/pod2.json"
  sed "s#docker.io/library/busybox:latest#$W/count.tar#; s/count.log/restored.log/" "$W/count.json" >"$W/restore.json"
  RP=$($C runp "$W/pod2.json"); RC=$($C create "$RP" "$W/restore.json" "$W/pod2.json" 2>>"$R")
  T0=$(date +%s.%N); run $C start "$RC"
  echo "restore (start) took $(awk -v a="$T0" -v b="$(date +%s.%N)" "BEGIN{print b-a}") s" >>"$R"
  sleep 1; echo "restored log, first lines: $(head -3 "$W/logs/restored.log" | tr '\n' ' ')" >>"$R"
  run $C stopp "$RP"; run $C rmp "$RP"; run $C stopp "$KP"; run $C rmp "$KP"
else
  say "no usable CRIU here: checkpoint and restore not tried"
fi

say "leftovers after removal"
# The pod's cgroup_parent is the kubelet's to make and remove; runc made it here.
rmdir /sys/fs/cgroup/shimdv2pod 2>/dev/null
run bash -c "ls -A $W/state/netns; ls -A $W/state/userns 2>/dev/null; find /sys/fs/cgroup -name '*shimd*'"
kill "$SPID"; wait "$SPID" 2>/dev/null
say "cgroup_driver = systemd on a host without systemd"
sed 's/^socket = .*/cgroup_driver = "systemd"\nsocket = "\/tmp\/shimd-v2\/s2.sock"/' "$W/shimd.toml" >"$W/sd.toml"
run timeout 20 shimd --config "$W/sd.toml"
kill "$CPID"; wait "$CPID" 2>/dev/null
say "shimd log: level=error lines"; grep 'level=error' "$W/shimd.log" | tail -20 >>"$R"
