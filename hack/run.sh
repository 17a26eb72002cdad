#!/usr/bin/env bash
# Sets up this Debian 12 machine and runs shimd in the background:
#   - installs containerd, runc and the CNI plugins from Debian if they are missing,
#   - starts containerd (with its own CRI plugin off) if nothing answers on its socket,
#   - writes a bridge CNI network in 198.18.0.0/16 if /etc/cni/net.d has none,
#   - builds shimd and starts it on /run/shimd/shimd.sock.
# Logs: /var/log/shimd/{containerd,shimd}.log. Stop: kill "$(cat /run/shimd/shimd.pid)".
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "run as root" >&2; exit 1; }

CONTAINERD_SOCK=${CONTAINERD_SOCK:-/run/containerd/containerd.sock}
LOGDIR=/var/log/shimd
mkdir -p "$LOGDIR" /etc/shimd /run/shimd

if ! command -v containerd >/dev/null || ! command -v runc >/dev/null || ! [ -x /usr/lib/cni/bridge ] && ! [ -x /opt/cni/bin/bridge ]; then
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq containerd runc containernetworking-plugins iptables >/dev/null
fi

if ! ctr --address "$CONTAINERD_SOCK" version >/dev/null 2>&1; then
	cat >/etc/shimd/containerd.toml <<TOML
version = 2
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "$CONTAINERD_SOCK"
TOML
	echo "starting containerd ($(containerd --version | awk '{print $3}'))"
	nohup containerd --config /etc/shimd/containerd.toml >"$LOGDIR/containerd.log" 2>&1 &
	for _ in $(seq 100); do ctr --address "$CONTAINERD_SOCK" version >/dev/null 2>&1 && break; sleep 0.1; done
fi

mkdir -p /etc/cni/net.d
if [ -z "$(ls /etc/cni/net.d 2>/dev/null)" ]; then
	cat >/etc/cni/net.d/10-shimd.conflist <<'JSON'
{
  "cniVersion": "0.4.0",
  "name": "shimd",
  "plugins": [
    {"type": "bridge", "bridge": "shimd0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "198.18.0.0/16"}]], "dataDir": "/var/lib/shimd/ipam"}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
JSON
fi
sysctl -qw net.ipv4.conf.all.route_localnet=1 || true

go build -o bin/shimd ./cmd/shimd
install -m 0755 bin/shimd /usr/local/bin/shimd
if [ -f /run/shimd/shimd.pid ] && kill -0 "$(cat /run/shimd/shimd.pid)" 2>/dev/null; then
	kill "$(cat /run/shimd/shimd.pid)"; sleep 1
fi
nohup /usr/local/bin/shimd --containerd-address "$CONTAINERD_SOCK" >"$LOGDIR/shimd.log" 2>&1 &
echo $! >/run/shimd/shimd.pid
for _ in $(seq 100); do [ -S /run/shimd/shimd.sock ] && break; sleep 0.1; done
[ -S /run/shimd/shimd.sock ] || { tail -20 "$LOGDIR/shimd.log"; exit 1; }
echo "shimd is running (pid $(cat /run/shimd/shimd.pid)) on unix:///run/shimd/shimd.sock; log: $LOGDIR/shimd.log"
