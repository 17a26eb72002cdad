#!/bin/bash
# Builds the SELinux variant of the test guest (critest/vm, vm.UpConfig.SELinux):
# image.sh's image with Debian's SELinux added (the reference policy,
# selinux-policy-default, which has the container module: container_t,
# container_file_t and MCS), its files labelled on the host with setfiles, booted
# with "security=selinux selinux=1 enforcing=1"; policy modules it adds:
# critest/vm/selinux. image.sh is left as it is, so the
# cgroup v2 guest the other tests use does not change.
#
# Usage: image-selinux.sh [CACHE_DIR]   (default /var/cache/shimd/tools/vm)
# Prints the image directory on its last line; it is named by this script's hash and
# the base image's. Needs root, loop devices, and a host kernel that lets root write
# security.selinux xattrs (one without SELinux does).
set -euo pipefail

cache=${1:-/var/cache/shimd/tools/vm}
here=$(cd "$(dirname "$0")" && pwd)
base=$(bash "$here/image.sh" "$cache" | tail -n 1)
key=$( (cat "$0" "$here"/selinux/*; basename "$base") | sha256sum | cut -c1-12)
dest=$cache/selinux-$key
if [ -f "$dest/done" ]; then
	echo "$dest"
	exit 0
fi

work=$(mktemp -d /var/tmp/shimd-vm-selinux.XXXXXX)
root=$work/root
cleanup() {
	umount "$root/proc" 2>/dev/null || true
	umount "$root" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
cp --sparse=always "$base/disk.raw" "$work/disk.raw"
mkdir -p "$root"
mount -o loop "$work/disk.raw" "$root"
mount -t proc proc "$root/proc"

# Debian's packages, through this machine's apt sources; nothing of the host stays.
cp /etc/resolv.conf "$root/etc/resolv.conf"
mkdir -p "$root/etc/apt/sources.list.d" "$root/etc/apt/apt.conf.d"
cp /etc/apt/sources.list.d/debian.sources "$root/etc/apt/sources.list.d/shimd-host.sources"
rm -f "$root/etc/apt/sources.list"
echo "image-selinux.sh: installing SELinux into $root" >&2
chroot "$root" apt-get -q update >&2
chroot "$root" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
	selinux-basics selinux-policy-default policycoreutils selinux-utils attr \
	selinux-policy-dev selinux-policy-src make zstd >&2

sed -i 's/^SELINUX=.*/SELINUX=enforcing/; s/^SELINUXTYPE=.*/SELINUXTYPE=default/' "$root/etc/selinux/config"
policy=$root/etc/selinux/default
# go-selinux reads the container labels from contexts/lxc_contexts, which Debian's
# policy ships (process container_t, file container_file_t) ...
test -f "$policy/contexts/lxc_contexts"
# ... but its policy has no container module: the reference policy's source has one
# (policy/modules/services/container.te), Debian does not build it. Build it, and
# shimd_container (critest/vm/selinux), from the policy's own source and headers.
mods=$root/root/shimd-policy
mkdir -p "$mods"
chroot "$root" tar -C /root/shimd-policy --strip-components=4 --zstd -xf /usr/src/selinux-policy-src.tar.zst \
	selinux-policy-src/policy/modules/services/container.te selinux-policy-src/policy/modules/services/container.fc
cp "$here/selinux/shimd_container.te" "$mods/"
chroot "$root" make -C /root/shimd-policy -f /usr/share/selinux/devel/Makefile container.pp shimd_container.pp >&2
chroot "$root" semodule -i /root/shimd-policy/container.pp /root/shimd-policy/shimd_container.pp >&2
chroot "$root" semodule -l | grep -E '^(container|shimd_container)$' >&2
rm -rf "$mods"
chroot "$root" env DEBIAN_FRONTEND=noninteractive apt-get purge -y -q selinux-policy-src >&2
# containerd makes these itself, with its parent's label; made here, they get the
# file_contexts' labels, which its children inherit (container_ro_file_t: the
# snapshots containers run from).
mkdir -p "$root/var/lib/containerd/io.containerd.snapshotter.v1.overlayfs/snapshots"

: >"$root/etc/resolv.conf"
rm -f "$root/etc/apt/sources.list.d/shimd-host.sources"
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
# Label every file as the policy says, with /proc mounted (setfiles needs it); no
# autorelabel boot, which under emulation takes many minutes.
chroot "$root" setfiles -F /etc/selinux/default/contexts/files/file_contexts / >&2
python3 "$here/selinux/label-missing.py" "$root"
rm -f "$root/.autorelabel"
umount "$root/proc"
umount "$root"

mkdir -p "$dest"
cp "$base/vmlinuz" "$base/initrd.img" "$dest/"
cp --sparse=always "$work/disk.raw" "$dest/disk.raw"
touch "$dest/done"
find "$cache" -maxdepth 1 -name 'selinux-*' ! -name "selinux-$key" -exec rm -rf {} +
echo "$dest"
