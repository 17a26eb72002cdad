#!/bin/bash
# Packs what the benchmarks need on a host without Go, iproute2, a registry or any
# of our tools (the many-core cgroup v2 test machine) into .manycore/ in the
# repository: the compiled critest/bench test binary, shimd, containerd 2.4 with its
# runc shim and runc (from hack/tools.sh), Debian's CNI plugins and docker-registry
# (both need only glibc), the offline busybox image's registry storage, all stripped
# and in one xz tarball (about 40 MiB), and a static busybox to unpack it where the
# host has no xz. hack/manycore/run.sh, run there from the repository root, uses it.
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
