#!/bin/bash
# Builds the test VM's guest (critest/vm): Debian 12 from Debian's packages
# (debootstrap), systemd as PID 1 on a pure cgroup v2 hierarchy, Debian's kernel
# (with AppArmor, as Debian boots it), apparmor_parser, iptables, CNI plugins,
# docker-registry and the libraries CRIU 4.1 needs. The
# binaries under test (shimd, containerd 2.4.2, runc 1.5.2, kubelet, critest, the
# agent) are not in the image: the guest runs them from the host's 9p share
# mounted at /mnt/host, so one image serves every build.
#
# Usage: image.sh [CACHE_DIR]   (default /var/cache/shimd/tools/vm)
# Prints the image directory (disk.raw, vmlinuz, initrd.img) on its last line. The
# directory is named by this script's hash: a changed script builds a new image.
# Needs root; installs qemu-system-x86, debootstrap, e2fsprogs and busybox when
# missing.
set -euo pipefail

cache=${1:-/var/cache/shimd/tools/vm}
key=$(sha256sum "$0" | cut -c1-12)
dest=$cache/bookworm-$key
need=()
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v mkfs.ext4 >/dev/null || need+=(e2fsprogs)
# QEMU's guestfwd runs "busybox nc" for each connection the guest makes (vm.Forward).
command -v busybox >/dev/null || need+=(busybox)
if [ ${#need[@]} -gt 0 ]; then
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}" >&2
fi

if [ -f "$dest/done" ]; then
	echo "$dest"
	exit 0
fi

# The archive this machine's apt uses.
mirror=$(sed -n 's/^URIs: *\(http[^ ]*debian\)$/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -1)
mirror=${mirror:-http://deb.debian.org/debian}

pkgs=(
	systemd systemd-sysv dbus udev kmod linux-image-amd64
	iproute2 iptables procps util-linux e2fsprogs mount less
	libseccomp2 containernetworking-plugins docker-registry
	# critest loads its AppArmor profiles with "sudo apparmor_parser".
	apparmor sudo
	# CRIU 4.1.1 built on the host runs with these.
	libprotobuf-c1 libnl-3-200 libnet1 libbsd0 libgnutls30 libnftables1 libcap2
)
work=$(mktemp -d /var/tmp/shimd-vm-image.XXXXXX)
trap 'rm -rf "$work"' EXIT
root=$work/root
mkdir -p "$cache/debs"
echo "image.sh: debootstrap bookworm from $mirror into $root" >&2
debootstrap --variant=minbase --cache-dir="$cache/debs" \
	--include="$(IFS=,; echo "${pkgs[*]}")" bookworm "$root" "$mirror" >&2

echo shimd-vm >"$root/etc/hostname"
printf '127.0.0.1 localhost\n127.0.1.1 shimd-vm\n' >"$root/etc/hosts"
# No network device: the guest resolves nothing.
: >"$root/etc/resolv.conf"
cat >"$root/etc/fstab" <<'EOF'
/dev/vda  /              ext4  rw,noatime,errors=remount-ro  0 1
host      /mnt/host      9p    trans=virtio,version=9p2000.L,msize=262144,nofail  0 0
tools     /mnt/tools     9p    trans=virtio,version=9p2000.L,msize=262144,ro,nofail  0 0
registry  /mnt/registry  9p    trans=virtio,version=9p2000.L,msize=262144,ro,nofail  0 0
EOF
mkdir -p "$root/mnt/host" "$root/mnt/tools" "$root/mnt/registry"
chroot "$root" passwd -d root >/dev/null

# A root shell on the serial console.
mkdir -p "$root/etc/systemd/system/serial-getty@ttyS0.service.d"
cat >"$root/etc/systemd/system/serial-getty@ttyS0.service.d/autologin.conf" <<'EOF'
[Service]
ExecStart=
ExecStart=-/sbin/agetty --autologin root --keep-baud 115200,57600,38400,9600 %I $TERM
EOF

# The agent, run from the share so that the image does not change with it.
cat >"$root/etc/systemd/system/shimd-vm-agent.service" <<'EOF'
[Unit]
Description=shimd test VM agent (critest/vm/agent)
Requires=mnt-host.mount
After=mnt-host.mount
DefaultDependencies=no
[Service]
ExecStart=/mnt/host/bin/shimd-vm-agent
Restart=always
RestartSec=1
[Install]
WantedBy=multi-user.target
EOF
chroot "$root" systemctl enable shimd-vm-agent.service >&2
# Nothing that wakes up on its own and spends emulated CPU.
for u in apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer \
	e2scrub_reap.service systemd-timesyncd.service docker-registry.service; do
	chroot "$root" systemctl mask "$u" >/dev/null 2>&1 || true
done
# The kubelet wants swap off and these sysctls; containers want bridged traffic.
cat >"$root/etc/sysctl.d/90-shimd-vm.conf" <<'EOF'
net.ipv4.ip_forward = 1
kernel.panic = 10
kernel.panic_on_oops = 1
vm.overcommit_memory = 1
EOF
printf 'br_netfilter\noverlay\n9p\n9pnet_virtio\nvirtio_console\n' >"$root/etc/modules-load.d/shimd-vm.conf"

mkdir -p "$dest"
cp "$root"/boot/vmlinuz-* "$dest/vmlinuz"
cp "$root"/boot/initrd.img-* "$dest/initrd.img"
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
mkfs.ext4 -q -L shimd-vm -d "$root" "$dest/disk.raw" 12G
touch "$dest/done"
# Images of earlier versions of this script.
find "$cache" -maxdepth 1 -name 'bookworm-*' ! -name "bookworm-$key" -exec rm -rf {} +
echo "$dest"
