#!/usr/bin/env bash
# Installs what shimd's tests and README commands need, on Debian 12, as root.
#   hack/tools.sh debs       Debian packages (containerd 1.6, runc, CNI plugins, registry, ...)
#   hack/tools.sh containerd containerd 2.4.2, its runc shim and ctr, from the Go module proxy
#   hack/tools.sh runc       runc 1.5.2 from the Go module proxy (seccomp build)
#   hack/tools.sh critools   crictl and critest v1.36.0, and the ginkgo CLI
#   hack/tools.sh kubelet    kubelet v1.34.12 (about 6 minutes, 1.5 GB of memory)
#   hack/tools.sh cluster    kube-apiserver, kube-controller-manager, kube-scheduler, kubectl
#                            v1.34.12 and etcd, for the one-node cluster (make e2e-cluster)
#   hack/tools.sh all        all of the above
# Binaries go to $SHIMD_TOOLS (default /var/cache/shimd/tools/bin) and are reused when present.
set -euo pipefail

TOOLS=${SHIMD_TOOLS:-/var/cache/shimd/tools}
BIN=$TOOLS/bin
CONTAINERD_VERSION=${CONTAINERD_VERSION:-v2.4.2}
RUNC_VERSION=${RUNC_VERSION:-v1.5.2}
CRITOOLS_VERSION=${CRITOOLS_VERSION:-v1.36.0}
GINKGO_VERSION=${GINKGO_VERSION:-v2.28.1}
KUBELET_VERSION=${KUBELET_VERSION:-v1.34.12}
ETCD_VERSION=${ETCD_VERSION:-v3.6.4}
mkdir -p "$BIN"
# One run at a time: a second caller waits, then finds the binaries cached.
if [ -z "${SHIMD_TOOLS_LOCKED:-}" ]; then
	export SHIMD_TOOLS_LOCKED=1
	exec flock "$TOOLS/.lock" "$0" "$@"
fi
export GOBIN=$BIN GOFLAGS=${GOFLAGS:--mod=mod}

log() { echo "tools: $*" >&2; }

debs() {
	local want=(containerd runc containernetworking-plugins iptables iproute2 busybox-static
		docker-registry skopeo umoci libseccomp-dev pkg-config apache2-utils
		systemd) # systemd: only systemd-analyze, to verify shimd's units; nothing runs it as PID 1
	local missing=()
	for p in "${want[@]}"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	log "apt-get install ${missing[*]}"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
	# Debian starts nothing without systemd, but make sure the packaged daemon is not ours.
}

containerd_bins() {
	if [ -x "$BIN/containerd" ] && "$BIN/containerd" --version | grep -q "$CONTAINERD_VERSION"; then return 0; fi
	log "building containerd $CONTAINERD_VERSION"
	(cd / && go install -ldflags "-X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION" \
		"github.com/containerd/containerd/v2/cmd/containerd@$CONTAINERD_VERSION" \
		"github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@$CONTAINERD_VERSION" \
		"github.com/containerd/containerd/v2/cmd/ctr@$CONTAINERD_VERSION")
}

runc_bin() {
	if [ -x "$BIN/runc" ] && "$BIN/runc" --version | grep -q "${RUNC_VERSION#v}"; then return 0; fi
	log "building runc $RUNC_VERSION"
	(cd / && CGO_ENABLED=1 go install -tags seccomp -ldflags "-X main.version=${RUNC_VERSION#v}" \
		"github.com/opencontainers/runc@$RUNC_VERSION")
}

critools() {
	if [ -x "$BIN/critest" ] && [ -x "$BIN/crictl" ] && [ -x "$BIN/ginkgo" ] &&
		"$BIN/crictl" --version | grep -q "${CRITOOLS_VERSION#v}"; then return 0; fi
	log "building crictl and critest $CRITOOLS_VERSION"
	local d
	d=$(mktemp -d)
	(
		cd "$d"
		export GONOSUMDB=k8s.io,sigs.k8s.io GOFLAGS=-mod=mod
		go mod init x >/dev/null 2>&1
		go get "sigs.k8s.io/cri-tools@$CRITOOLS_VERSION" >/dev/null 2>&1
		go build -ldflags "-X sigs.k8s.io/cri-tools/pkg/version.Version=$CRITOOLS_VERSION" -o "$BIN/crictl" sigs.k8s.io/cri-tools/cmd/crictl
		go test -c -ldflags "-X sigs.k8s.io/cri-tools/pkg/version.Version=$CRITOOLS_VERSION" -o "$BIN/critest" sigs.k8s.io/cri-tools/cmd/critest
		go install "github.com/onsi/ginkgo/v2/ginkgo@$GINKGO_VERSION"
	)
	rm -rf "$d"
}

# k8s_module prepares, in the current directory, a throwaway module that requires
# k8s.io/kubernetes $KUBELET_VERSION: it requires its staging modules at v0.0.0, so each
# is replaced with the published version of the same release (read from its go.mod).
k8s_module() {
	export GONOSUMDB=k8s.io/kubernetes GOFLAGS=-mod=mod CGO_ENABLED=0
	go mod init x >/dev/null 2>&1
	go mod download -json "k8s.io/kubernetes@$KUBELET_VERSION" >mod.json
	local gomod staging m
	gomod=$(sed -n 's/.*"GoMod": "\(.*\)".*/\1/p' mod.json)
	staging=$(grep -oE 'k8s.io/[a-z0-9-]+ => ./staging/src/k8s.io/[a-z0-9-]+' "$gomod" | awk '{print $1}' |
		grep -vE 'sample-cli-plugin|sample-controller')
	go mod edit -require="k8s.io/kubernetes@$KUBELET_VERSION"
	for m in $staging; do
		go mod edit -replace="$m=$m@v0${KUBELET_VERSION#v1}"
	done
	printf 'package main\n\nimport (\n' >main.go
	for m in "$@"; do printf '\t_ "%s"\n' "$m" >>main.go; done
	printf ')\n\nfunc main() {}\n' >>main.go
	go mod tidy >/dev/null 2>&1 || true
}

k8s_build() { # output-dir package...
	local out=$1
	shift
	go build -tags selinux,notest,grpcnotrace -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$KUBELET_VERSION" \
		-o "$out" "$@"
}

kubelet_bin() {
	if [ -x "$BIN/kubelet" ] && "$BIN/kubelet" --version | grep -q "$KUBELET_VERSION"; then return 0; fi
	log "building kubelet $KUBELET_VERSION"
	local d
	d=$(mktemp -d)
	(cd "$d" && k8s_module k8s.io/kubernetes/cmd/kubelet/app && k8s_build "$BIN/kubelet" k8s.io/kubernetes/cmd/kubelet)
	rm -rf "$d"
}

# The control plane of a one-node cluster (critest/cluster): kube-apiserver,
# kube-controller-manager, kube-scheduler and kubectl of the kubelet's release, built
# in one go build (shared compile), and etcd of the version that release's go.mod uses.
CLUSTER_BINS=(kube-apiserver kube-controller-manager kube-scheduler kubectl)
cluster_bins() {
	local b missing=0
	for b in "${CLUSTER_BINS[@]}"; do
		[ -x "$BIN/$b" ] && "$BIN/$b" --version 2>/dev/null | grep -q "$KUBELET_VERSION" || missing=1
	done
	if [ $missing = 1 ]; then
		log "building ${CLUSTER_BINS[*]} $KUBELET_VERSION (about 10 minutes)"
		local d out pkgs=()
		d=$(mktemp -d)
		out=$(mktemp -d)
		for b in "${CLUSTER_BINS[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$b"); done
		(cd "$d" && k8s_module "${pkgs[@]}" && k8s_build "$out/" "${pkgs[@]}")
		for b in "${CLUSTER_BINS[@]}"; do mv "$out/$b" "$BIN/$b"; done
		rm -rf "$d" "$out"
	fi
	if ! [ -x "$BIN/etcd" ] || ! "$BIN/etcd" --version | grep -q "etcd Version: ${ETCD_VERSION#v}"; then
		log "building etcd $ETCD_VERSION"
		local e
		e=$(mktemp -d)
		(
			cd "$e"
			export GOFLAGS=-mod=mod CGO_ENABLED=0
			go mod init x >/dev/null 2>&1
			go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >/dev/null 2>&1
			go build -o "$BIN/etcd" go.etcd.io/etcd/server/v3
		)
		rm -rf "$e"
	fi
}

case "${1:-all}" in
debs) debs ;;
containerd) containerd_bins ;;
runc) runc_bin ;;
critools) critools ;;
kubelet) kubelet_bin ;;
cluster) cluster_bins ;;
all) debs; containerd_bins; runc_bin; critools; kubelet_bin ;;
*) echo "usage: $0 debs|containerd|runc|critools|kubelet|cluster|all" >&2; exit 2 ;;
esac
