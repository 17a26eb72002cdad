#!/bin/bash
# Packs what the benchmarks need on a host without Go, iproute2, a registry or any
# of our tools (the many-core cgroup v2 test machine) into .manycore/ in the
# repository: the compiled critest/bench test binary, shimd, containerd 2.4 with its
# runc shim and runc (from hack/tools.sh), Debian's CNI plugins and docker-registry
# (both need only glibc), the offline busybox image's registry storage, all stripped
# and in one xz tarball (about 40 MiB), and a static busybox to unpack it where the
# host has no xz. hack/manycore/run.sh, run there from the repository root, uses it.
# MC_K8S=1 also packs the one-node cluster's binaries (hack/tools.sh cluster: the
# kubelet, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl and etcd of
# $KUBELET_VERSION) for BenchmarkKubeletDensity into .manycore-k8s/ (58 MiB with
# xz -9e, about ten minutes of CPU): too large to travel beside .manycore/ in one device
# call, so it goes in a call of its own; a warm machine keeps the earlier call's.
set -euo pipefail
cd "$(dirname "$0")/../.."
T=${SHIMD_TOOLS:-/var/cache/shimd/tools}/bin
REG=${SHIMD_REGISTRY_STORAGE:-/var/cache/shimd/registry}/docker/registry/v2
O=.manycore; S=$(mktemp -d); trap 'rm -rf "$S"' EXIT
rm -rf "$O"; mkdir -p "$O" "$S/bin" "$S/cni" "$S/reg/docker/registry/v2/repositories/library"
cp "$T/containerd" "$T/containerd-shim-runc-v2" "$T/runc" "$S/bin/"
cp /usr/bin/docker-registry "$S/"
cp /usr/lib/cni/bridge /usr/lib/cni/host-local /usr/lib/cni/loopback /usr/lib/cni/portmap "$S/cni/"
go build -tags nri_no_wasm -o "$S/shimd" ./cmd/shimd
go test -c -tags integration -o "$S/bench.test" ./critest/bench
strip "$S"/bin/* "$S"/cni/* "$S/docker-registry" "$S/shimd" "$S/bench.test"
# Only the busybox repository and the blobs its links name.
cp -a "$REG/repositories/library/busybox" "$S/reg/docker/registry/v2/repositories/library/"
for d in $(find "$S/reg" -name link -exec sh -c 'cat "$1"; echo' _ {} \; | sed 's/^sha256://' | sort -u); do
	mkdir -p "$S/reg/docker/registry/v2/blobs/sha256/${d:0:2}/$d"
	cp "$REG/blobs/sha256/${d:0:2}/$d/data" "$S/reg/docker/registry/v2/blobs/sha256/${d:0:2}/$d/"
done
git rev-parse HEAD >"$S/commit"
tar -C "$S" -cf - . | xz -6 -T0 >"$O/bundle.tar.xz"
cp /bin/busybox "$O/busybox" # Debian's busybox-static
du -sh "$O"/*
if [ "${MC_K8S-}" = 1 ]; then
	K=k8s-${KUBELET_VERSION:-v1.37.2}
	rm -rf .manycore-k8s; mkdir -p .manycore-k8s "$S/k/$K"
	for b in kubelet kube-apiserver kube-controller-manager kube-scheduler kubectl etcd etcd.version; do
		cp "$T/$K/$b" "$S/k/$K/" || { echo "no $T/$K/$b: run hack/tools.sh cluster first" >&2; exit 1; }
	done
	strip "$S/k/$K"/kube* "$S/k/$K/etcd"
	# One thread: a single xz block finds what the binaries share (-T0 splits them).
	tar -C "$S/k" -cf - "$K" | xz -9e -T1 >.manycore-k8s/k8s.tar.xz
	# A device call carries at most 64 MiB with the working tree: what of the
	# tarball does not fit in its own call goes with .manycore/ (run.sh joins them).
	tree=$(git ls-files -co --exclude-standard -z | du -cb --files0-from=- | tail -1 | cut -f1)
	room=$(((63 << 20) - tree))
	k=$(stat -c %s .manycore-k8s/k8s.tar.xz)
	if [ "$k" -gt "$room" ]; then
		tail -c $((k - room)) .manycore-k8s/k8s.tar.xz >"$O/k8s.tar.xz.tail"
		truncate -s "$room" .manycore-k8s/k8s.tar.xz
	fi
	for d in "$O" .manycore-k8s; do
		n=$(du -cb "$d" | tail -1 | cut -f1)
		echo "$d: $((n >> 20)) MiB, with the working tree $(((n + tree) >> 20)) of the 64 MiB a device call carries"
		[ "$((n + tree))" -le $((64 << 20)) ] || { echo "$d is too large to carry" >&2; exit 1; }
	done
fi
