#!/usr/bin/env bash
# Sets up this Debian 12 machine and runs shimd in the background:
#   - installs containerd, runc and the CNI plugins from Debian if they are missing,
#   - starts containerd (with its own CRI plugin off) if nothing answers on its socket,
#   - writes a bridge CNI network in 198.18.0.0/16 if /etc/cni/net.d has none,
#   - installs crictl v1.37.0 to /usr/local/bin if no crictl is on PATH, and writes
#     /etc/crictl.yaml for shimd's socket (an existing one that points elsewhere is
#     kept as /etc/crictl.yaml.bak), so that `crictl pods` works at once,
#   - builds shimd and starts it on /run/shimd/shimd.sock.
# With systemd as PID 1, containerd and shimd run as systemd services (`make install`
# puts shimd.service in place; a containerd this script installs gets the drop-in
# hack/systemd/containerd.service.d/10-shimd.conf). Logs: journalctl -u shimd; stop:
# systemctl stop shimd.
# Without systemd they run in the background. Logs: /var/log/shimd/{containerd,shimd}.log.
# Stop: kill "$(cat /run/shimd/shimd.pid)".
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "run as root" >&2; exit 1; }

CONTAINERD_SOCK=${CONTAINERD_SOCK:-/run/containerd/containerd.sock}
SHIMD_ENDPOINT=unix:///run/shimd/shimd.sock
CRICTL_VERSION=${CRICTL_VERSION:-v1.37.0}
LOGDIR=/var/log/shimd
mkdir -p "$LOGDIR" /etc/shimd /run/shimd
# systemd runs as PID 1 (not merely installed): the directory exists only then.
SYSTEMD=false
[ -d /run/systemd/system ] && [ "$(cat /proc/1/comm 2>/dev/null)" = systemd ] && SYSTEMD=true

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
	if $SYSTEMD; then
		install -D -m 0644 hack/systemd/containerd.service.d/10-shimd.conf /etc/systemd/system/containerd.service.d/10-shimd.conf
		systemctl daemon-reload
		systemctl enable containerd >/dev/null 2>&1 || true
		systemctl restart containerd
	else
		nohup containerd --config /etc/shimd/containerd.toml >"$LOGDIR/containerd.log" 2>&1 &
	fi
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

# crictl: the copy hack/tools.sh critools built, if it is there; else the same steps
# for crictl alone (a throwaway module, cri-tools from the Go module proxy).
install_crictl() {
	command -v crictl >/dev/null && return 0
	local cached=${SHIMD_TOOLS:-/var/cache/shimd/tools}/bin/cri-tools-$CRICTL_VERSION/crictl d
	if [ -x "$cached" ] && "$cached" --version | grep -q "${CRICTL_VERSION#v}"; then
		install -m 0755 "$cached" /usr/local/bin/crictl
	else
		echo "building crictl $CRICTL_VERSION"
		d=$(mktemp -d)
		if ! (cd "$d" && export GONOSUMDB=k8s.io,sigs.k8s.io GOFLAGS=-mod=mod &&
			go mod init x >/dev/null 2>&1 &&
			go get "sigs.k8s.io/cri-tools@$CRICTL_VERSION" >/dev/null 2>&1 &&
			go build -ldflags "-X sigs.k8s.io/cri-tools/pkg/version.Version=$CRICTL_VERSION" -o crictl sigs.k8s.io/cri-tools/cmd/crictl); then
			rm -rf "$d"
			echo "could not build crictl $CRICTL_VERSION (is go on PATH, does the Go module proxy answer?)" >&2
			exit 1
		fi
		install -m 0755 "$d/crictl" /usr/local/bin/crictl
		rm -rf "$d"
	fi
	echo "installed crictl $CRICTL_VERSION to /usr/local/bin/crictl"
}

# endpoint KEY FILE: the value of KEY in a crictl.yaml, without quotes.
endpoint() { sed -n "s/^$1:[[:space:]]*['\"]\{0,1\}\([^'\"[:space:]]*\).*/\1/p" "$2" | head -1; }

# /etc/crictl.yaml as containerd's and CRI-O's packages write it, for shimd's socket.
write_crictl_config() {
	local f=/etc/crictl.yaml rt img
	if [ -f "$f" ]; then
		rt=$(endpoint runtime-endpoint "$f")
		img=$(endpoint image-endpoint "$f")
		if [ "$rt" = "$SHIMD_ENDPOINT" ] && { [ -z "$img" ] || [ "$img" = "$SHIMD_ENDPOINT" ]; }; then
			return 0
		fi
		cp -p "$f" "$f.bak"
		echo "$f pointed at ${rt:-no runtime endpoint}${img:+ (images: $img)}; kept it as $f.bak and wrote one for shimd"
	fi
	cat >"$f" <<YAML
runtime-endpoint: $SHIMD_ENDPOINT
image-endpoint: $SHIMD_ENDPOINT
timeout: 10
YAML
}

install_crictl
write_crictl_config

if $SYSTEMD; then
	# The unit, the binary and (unless present) a commented default config.
	make install PREFIX=/usr/local >/dev/null
	if [ "$CONTAINERD_SOCK" != /run/containerd/containerd.sock ]; then
		mkdir -p /etc/systemd/system/shimd.service.d
		printf '[Service]\nExecStart=\nExecStart=/usr/local/bin/shimd --config /etc/shimd/config.toml --containerd-address %s\n' \
			"$CONTAINERD_SOCK" >/etc/systemd/system/shimd.service.d/10-address.conf
	fi
	systemctl daemon-reload
	systemctl enable shimd >/dev/null 2>&1
	# Type=notify: returns once shimd has recovered and serves. Pods survive the restart.
	systemctl restart shimd
	echo "shimd is running under systemd (systemctl status shimd) on $SHIMD_ENDPOINT; log: journalctl -u shimd; try: crictl pods"
	exit 0
fi

go build -tags nri_no_wasm -o bin/shimd ./cmd/shimd # as make build
install -m 0755 bin/shimd /usr/local/bin/shimd
if [ -f /run/shimd/shimd.pid ] && kill -0 "$(cat /run/shimd/shimd.pid)" 2>/dev/null; then
	kill "$(cat /run/shimd/shimd.pid)"; sleep 1
fi
nohup /usr/local/bin/shimd --containerd-address "$CONTAINERD_SOCK" >"$LOGDIR/shimd.log" 2>&1 &
echo $! >/run/shimd/shimd.pid
for _ in $(seq 100); do [ -S /run/shimd/shimd.sock ] && break; sleep 0.1; done
[ -S /run/shimd/shimd.sock ] || { tail -20 "$LOGDIR/shimd.log"; exit 1; }
echo "shimd is running (pid $(cat /run/shimd/shimd.pid)) on $SHIMD_ENDPOINT; log: $LOGDIR/shimd.log; try: crictl pods"
