#!/bin/bash
# Runs in the test VM (critest/vm) as root: installs what `make install` put under
# /mnt/host/install (shimd, its systemd unit, its default config), gives
# containerd 2.4.2 (from the host's tool cache, /mnt/tools) a unit and shimd's
# containerd config, serves the offline image set (/mnt/registry) on
# 127.0.0.1:5000 for every mirrored registry, writes a CNI bridge on 198.19.0.0/17,
# and starts containerd and shimd with systemd.
#
# Usage: provision.sh systemd|cgroupfs    (the cgroup driver shimd uses)
set -euo pipefail
driver=${1:-systemd}
selinux=${2:-}
tools=/mnt/tools/bin
echo "provision: cgroup fs $(stat -fc %T /sys/fs/cgroup), PID 1 $(cat /proc/1/comm), kernel $(uname -r), driver $driver"

# QEMU's user network when the host forwards ports to the guest (vm.Forward). A
# guest on a host bridge (vm.Config.Tap, SHIMD_VM_NET=bridged) gets its address
# from whoever put it there.
if [ -e /sys/class/net/eth0 ] && [ "${SHIMD_VM_NET:-}" != bridged ]; then
	ip link set eth0 up
	ip addr add 198.18.254.15/24 dev eth0
fi

# Not the share's extended attributes (cp -a would put the 9p files' SELinux labels
# on /, /usr and /etc).
cp -dR --preserve=mode,ownership,timestamps /mnt/host/install/. /
# crictl of the newest cri-tools the host built (hack/tools.sh: bin/cri-tools-<version>).
crictl=$( (ls -d "$tools"/cri-tools-v*/crictl 2>/dev/null || true) | sort -V | tail -n 1)
ln -sf "${crictl:-$tools/crictl}" /usr/local/bin/crictl
ln -sf "$tools/runc" /usr/local/sbin/runc
ln -sf "$tools/containerd-shim-runc-v2" /usr/local/bin/containerd-shim-runc-v2
ln -sf "$tools/ctr" /usr/local/bin/ctr
# CRIU as hack/tools.sh installs it on the host ($SHIMD_TOOLS/criu-<version>/sbin/criu;
# its bin/criu link is absolute, to the host's path).
for criu in /mnt/tools/criu-*/sbin/criu; do
	if [ -x "$criu" ]; then ln -sf "$criu" /usr/local/sbin/criu; fi
done

mkdir -p /etc/docker/registry
cat >/etc/docker/registry/config.yml <<'EOF'
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: /mnt/registry
  maintenance:
    uploadpurging:
      enabled: false
    readonly:
      enabled: true
http:
  addr: 127.0.0.1:5000
  secret: shimd-vm
EOF
systemctl unmask docker-registry.service >/dev/null 2>&1 || true

mkdir -p /etc/shimd/certs.d
for h in registry.k8s.io k8s.gcr.io gcr.io docker.io public.ecr.aws quay.io; do
	mkdir -p "/etc/shimd/certs.d/$h"
	printf 'server = "http://127.0.0.1:5000"\n[host."http://127.0.0.1:5000"]\n  capabilities = ["pull", "resolve"]\n' \
		>"/etc/shimd/certs.d/$h/hosts.toml"
done

cat >/etc/shimd/containerd.toml <<'EOF'
version = 3
disabled_plugins = ["io.containerd.cri.v1.runtime", "io.containerd.cri.v1.images", "io.containerd.grpc.v1.cri"]
EOF
cat >/etc/systemd/system/containerd.service <<EOF
[Unit]
Description=containerd container runtime (host tool cache)
After=local-fs.target mnt-tools.mount
Requires=mnt-tools.mount
[Service]
Environment=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
ExecStartPre=-/sbin/modprobe overlay
ExecStart=$tools/containerd --config /etc/shimd/containerd.toml
Type=notify
Delegate=yes
KillMode=process
Restart=always
RestartSec=2
LimitNPROC=infinity
LimitCORE=infinity
TasksMax=infinity
OOMScoreAdjust=-999
[Install]
WantedBy=multi-user.target
EOF

mkdir -p /etc/cni/net.d
cat >/etc/cni/net.d/10-shimd.conflist <<'EOF'
{"cniVersion": "1.0.0", "name": "shimd-vm", "plugins": [
  {"type": "bridge", "bridge": "shimd-vm0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "198.19.0.0/17"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}},
  {"type": "loopback"}
]}
EOF

# make install wrote the defaults, all commented out: these are the only settings.
conf=/etc/shimd/config.toml
if ! grep -q '^cgroup_driver' "$conf"; then
	printf '\n# critest/vm/provision.sh\ncgroup_driver = "%s"\n[registry]\n  config_path = "/etc/shimd/certs.d"\n' "$driver" >>"$conf"
fi
sed -i "s#^cgroup_driver = .*#cgroup_driver = \"$driver\"#" "$conf"
# The SELinux guest (image-selinux.sh): shimd labels pods.
sed -i '/^enable_selinux = /d' "$conf"
if [ "$selinux" = selinux ]; then
	sed -i 's#^cgroup_driver = .*#&\nenable_selinux = true#' "$conf"
	echo "provision: SELinux $(getenforce), policy $(sed -n 's/^SELINUXTYPE=//p' /etc/selinux/config)"
fi

cat >/etc/crictl.yaml <<'EOF'
runtime-endpoint: unix:///run/shimd/shimd.sock
image-endpoint: unix:///run/shimd/shimd.sock
timeout: 120
EOF

systemctl daemon-reload
systemctl enable --now docker-registry.service containerd.service shimd.service
for _ in $(seq 300); do crictl version >/dev/null 2>&1 && break; sleep 1; done
crictl version
systemctl is-active containerd shimd docker-registry
