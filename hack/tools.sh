#!/usr/bin/env bash
# Installs what shimd's tests and README commands need, on Debian 12, as root.
#   hack/tools.sh debs       Debian packages (containerd 1.6, runc, CNI plugins, registry, ...)
#   hack/tools.sh containerd containerd 2.4.2, its runc shim and ctr, from the Go module proxy
#   hack/tools.sh runc       runc 1.5.2 from the Go module proxy (seccomp build)
#   hack/tools.sh critools   crictl and critest $CRITOOLS_VERSION (default v1.37.0) and the
#                            ginkgo CLI, in bin/cri-tools-$CRITOOLS_VERSION
#   hack/tools.sh kubelet    kubelet $KUBELET_VERSION (about 6 minutes, 1.5 GB of memory)
#   hack/tools.sh cluster    kube-apiserver, kube-controller-manager, kube-scheduler, kubectl
#                            $KUBELET_VERSION and the etcd its go.mod uses, for the one-node
#                            cluster (make e2e-cluster)
#   hack/tools.sh kubeadm    kubeadm and kube-proxy $KUBELET_VERSION, CoreDNS
#                            $COREDNS_VERSION (the one kubeadm of that release deploys)
#                            and flanneld $FLANNEL_VERSION:
#                            the parts of a kubeadm cluster beyond the one-node cluster's
#                            (issue 47; part of all: make check runs the kubeadm smoke)
#   hack/tools.sh e2e        the upstream e2e test binary e2e.test, agnhost and the
#                            ginkgo CLI of e2e.test's ginkgo, $KUBELET_VERSION (make
#                            node-conformance; about 15 minutes and 4 GB of memory the first time)
#   hack/tools.sh sample-apiserver  k8s.io/sample-apiserver $KUBELET_VERSION, for the
#                            conformance image set (make conformance)
#   hack/tools.sh runsc      gVisor's runsc and containerd-shim-runsc-v1 (the runsc runtime handler)
#   hack/tools.sh criu       CRIU 4.1.1 (checkpoint/restore), built from Debian trixie's
#                            source tarball into $SHIMD_TOOLS/criu-4.1.1, linked as
#                            bin/criu and /usr/local/sbin/criu (about a minute)
#   hack/tools.sh containerd-profiled
#                            containerd $CONTAINERD_VERSION as bin/containerd-profiled, unchanged
#                            but for turning on Go's block and mutex profiles from its
#                            environment (make bench-burst with BENCH_CONTENTION=1)
#   hack/tools.sh all        all of the above but runsc and containerd-profiled (over 3 minutes: built by make critest-runsc)
# Binaries go to $SHIMD_TOOLS (default /var/cache/shimd/tools/bin) and are reused when present.
# KUBELET_VERSION (default v1.37.2) picks the Kubernetes release; its binaries go to a
# directory of their own, bin/k8s-$KUBELET_VERSION, so that releases never replace
# each other (KUBELET_VERSION=v1.34.12 builds the kubelet of the skew smoke,
# make e2e-kubelet-skew; critest/kubelet reads the same variable).
set -euo pipefail

TOOLS=${SHIMD_TOOLS:-/var/cache/shimd/tools}
BIN=$TOOLS/bin
CONTAINERD_VERSION=${CONTAINERD_VERSION:-v2.4.2}
RUNC_VERSION=${RUNC_VERSION:-v1.5.2}
CRITOOLS_VERSION=${CRITOOLS_VERSION:-v1.37.0}
KUBELET_VERSION=${KUBELET_VERSION:-v1.37.2}
# gVisor publishes no semver tags on the module proxy: a pseudo-version of its go branch.
GVISOR_VERSION=${GVISOR_VERSION:-v0.0.0-20260905035102-160fafc42237}
# CRIU: the upstream release and the Debian source package (trixie's) it is built from.
CRIU_VERSION=${CRIU_VERSION:-4.1.1}
CRIU_DEBIAN_VERSION=${CRIU_DEBIAN_VERSION:-$CRIU_VERSION-1}
# kubeadm v1.37.2 deploys CoreDNS v1.14.6 (cmd/kubeadm/app/constants: CoreDNSVersion).
COREDNS_VERSION=${COREDNS_VERSION:-v1.14.6}
# The pod network of the kubeadm cluster: flanneld (kube subnet manager, vxlan).
FLANNEL_VERSION=${FLANNEL_VERSION:-v0.28.10}
# Empty: the etcd version Kubernetes $KUBELET_VERSION's go.mod requires.
ETCD_VERSION=${ETCD_VERSION:-}
# One directory per Kubernetes release: the kubelet, the control plane, kubectl, etcd,
# e2e.test, agnhost and ginkgo-e2e. A binary of another release is never found here,
# and the version checks below compare what each binary says with the release.
KBIN=$BIN/k8s-$KUBELET_VERSION
mkdir -p "$BIN"
# One run at a time: a second caller waits, then finds the binaries cached.
if [ -z "${SHIMD_TOOLS_LOCKED:-}" ]; then
	export SHIMD_TOOLS_LOCKED=1
	exec flock "$TOOLS/.lock" "$0" "$@"
fi
export GOBIN=$BIN GOFLAGS=${GOFLAGS:--mod=mod}

log() { echo "tools: $*" >&2; }

# printed command...: what the command prints (stdout; stderr and its exit status are
# ignored), read whole. The version checks grep this, never a pipe: with pipefail,
# "binary --version | grep -q" fails whenever grep exits at its first match before
# the binary has written its last line (SIGPIPE), and the cached binary was rebuilt
# for nothing (kubectl, runc and etcd print several lines).
printed() { "$@" 2>/dev/null || true; }

# missing_debs package...: those of the packages that are not installed.
missing_debs() {
	local p
	for p in "$@"; do
		grep -q 'ok installed' <<<"$(printed dpkg-query -W -f='${Status}' "$p")" || echo "$p"
	done
}

debs() {
	local want=(containerd runc containernetworking-plugins iptables iproute2 busybox-static
		docker-registry skopeo umoci libseccomp-dev pkg-config apache2-utils
		systemd) # systemd: only systemd-analyze, to verify shimd's units; nothing runs it as PID 1
	local missing
	mapfile -t missing < <(missing_debs "${want[@]}")
	[ ${#missing[@]} -eq 0 ] && return 0
	log "apt-get install ${missing[*]}"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
	# Debian starts nothing without systemd, but make sure the packaged daemon is not ours.
}

containerd_bins() {
	if [ -x "$BIN/containerd" ] && grep -q "$CONTAINERD_VERSION" <<<"$(printed "$BIN/containerd" --version)"; then return 0; fi
	log "building containerd $CONTAINERD_VERSION"
	(cd / && go install -ldflags "-X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION" \
		"github.com/containerd/containerd/v2/cmd/containerd@$CONTAINERD_VERSION" \
		"github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@$CONTAINERD_VERSION" \
		"github.com/containerd/containerd/v2/cmd/ctr@$CONTAINERD_VERSION")
}

# containerd's binary never turns on Go's block and mutex profiles, so its
# /debug/pprof/block and /debug/pprof/mutex stay empty. This build is containerd's
# own cmd/containerd/main.go, copied from the module, beside one
# init that calls runtime.SetBlockProfileRate($CONTAINERD_BLOCK_PROFILE_RATE, in ns)
# and runtime.SetMutexProfileFraction($CONTAINERD_MUTEX_PROFILE_FRACTION) when they
# are set. For benchmarks only (SHIMD_CONTAINERD=profiled); the tests use containerd.
containerd_profiled_bin() {
	if [ -x "$BIN/containerd-profiled" ] && grep -q "$CONTAINERD_VERSION" <<<"$(printed "$BIN/containerd-profiled" --version)"; then return 0; fi
	log "building containerd-profiled $CONTAINERD_VERSION"
	local d
	d=$(mktemp -d)
	(
		cd "$d"
		export GOFLAGS=-mod=mod
		go mod init containerd-profiled >/dev/null 2>&1
		cat >profile.go <<'GO'
package main

import (
	"os"
	"runtime"
	"strconv"
)

func init() {
	if n, err := strconv.Atoi(os.Getenv("CONTAINERD_BLOCK_PROFILE_RATE")); err == nil {
		runtime.SetBlockProfileRate(n)
	}
	if n, err := strconv.Atoi(os.Getenv("CONTAINERD_MUTEX_PROFILE_FRACTION")); err == nil {
		runtime.SetMutexProfileFraction(n)
	}
}
GO
		go get "github.com/containerd/containerd/v2@$CONTAINERD_VERSION" >/dev/null 2>&1
		cp "$(go list -m -f '{{.Dir}}' github.com/containerd/containerd/v2)/cmd/containerd/main.go" .
		chmod u+w main.go
		go mod tidy >/dev/null 2>&1
		go build -ldflags "-X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION" \
			-o "$BIN/containerd-profiled" .
	)
	rm -rf "$d"
}

runc_bin() {
	if [ -x "$BIN/runc" ] && grep -q "${RUNC_VERSION#v}" <<<"$(printed "$BIN/runc" --version)"; then return 0; fi
	log "building runc $RUNC_VERSION"
	(cd / && CGO_ENABLED=1 go install -tags seccomp -ldflags "-X main.version=${RUNC_VERSION#v}" \
		"github.com/opencontainers/runc@$RUNC_VERSION")
}

# crictl, critest and the ginkgo CLI of cri-tools $CRITOOLS_VERSION go to a directory of
# their own, bin/cri-tools-$CRITOOLS_VERSION (critest/harness finds them there), so that
# two versions stay cached side by side and building one never replaces the other under
# a test that runs it. ginkgo is the version critest's go.mod requires (critest's
# -parallel runs it).
CRIBIN=$BIN/cri-tools-$CRITOOLS_VERSION
critools() {
	if [ -x "$CRIBIN/critest" ] && [ -x "$CRIBIN/crictl" ] && [ -x "$CRIBIN/ginkgo" ] &&
		grep -q "${CRITOOLS_VERSION#v}" <<<"$(printed "$CRIBIN/crictl" --version)"; then return 0; fi
	log "building crictl and critest $CRITOOLS_VERSION"
	local d out
	d=$(mktemp -d)
	out=$(mktemp -d)
	(
		cd "$d"
		export GONOSUMDB=k8s.io,sigs.k8s.io GOFLAGS=-mod=mod
		go mod init x >/dev/null 2>&1
		go get "sigs.k8s.io/cri-tools@$CRITOOLS_VERSION" >/dev/null 2>&1
		go build -ldflags "-X sigs.k8s.io/cri-tools/pkg/version.Version=$CRITOOLS_VERSION" -o "$out/crictl" sigs.k8s.io/cri-tools/cmd/crictl
		go test -c -vet=off -ldflags "-X sigs.k8s.io/cri-tools/pkg/version.Version=$CRITOOLS_VERSION" -o "$out/critest" sigs.k8s.io/cri-tools/cmd/critest
		GOBIN=$out go install "github.com/onsi/ginkgo/v2/ginkgo@$(go list -m -f '{{.Version}}' github.com/onsi/ginkgo/v2)"
	)
	mkdir -p "$CRIBIN"
	for b in crictl critest ginkgo; do mv "$out/$b" "$CRIBIN/$b"; done
	rm -rf "$d" "$out"
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
	# tidy drops k8s.io/kubernetes when only staging packages are imported (kubectl's).
	go mod edit -require="k8s.io/kubernetes@$KUBELET_VERSION"
}

# The version the binaries report (hack/lib/version.sh of the release sets the same).
k8s_ldflags() {
	local minor=${KUBELET_VERSION#v*.}
	echo "-s -w -X k8s.io/component-base/version.gitVersion=$KUBELET_VERSION" \
		"-X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${minor%%.*}"
}

k8s_build() { # output-dir package...
	local out=$1
	shift
	go build -tags selinux,notest,grpcnotrace -ldflags "$(k8s_ldflags)" -o "$out" "$@"
}

# The kubelet and the control plane of a one-node cluster (critest/cluster):
# kube-apiserver, kube-controller-manager, kube-scheduler and kubectl, all of one
# release, built by one go build (they share most of the compile).
KUBE_BINS=(kubelet kube-apiserver kube-controller-manager kube-scheduler kubectl)
kube_bins() { # name...: build those of them that are missing, at once
	local b missing=() pkgs=() apps=() d out
	for b in "$@"; do
		local v=--version
		[ "$b" = kubectl ] && v="version --client"
		[ "$b" = kubeadm ] && v="version -o short"
		# shellcheck disable=SC2086 # $v is two words for kubectl
		[ -x "$KBIN/$b" ] && grep -qwF -- "$KUBELET_VERSION" <<<"$(printed "$KBIN/$b" $v)" || missing+=("$b")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	log "building ${missing[*]} $KUBELET_VERSION (about 6 minutes for the kubelet alone, 10 for all)"
	for b in "${missing[@]}"; do
		pkgs+=("k8s.io/kubernetes/cmd/$b")
		case $b in
		kubectl) apps+=(k8s.io/kubectl/pkg/cmd) ;;
		*) apps+=("k8s.io/kubernetes/cmd/$b/app") ;;
		esac
	done
	d=$(mktemp -d)
	out=$(mktemp -d)
	(cd "$d" && k8s_module "${apps[@]}" && k8s_build "$out/" "${pkgs[@]}")
	mkdir -p "$KBIN"
	for b in "${missing[@]}"; do mv "$out/$b" "$KBIN/$b"; done
	rm -rf "$d" "$out"
}

# CoreDNS $COREDNS_VERSION, static, beside the release's binaries (kubeadm's DNS
# add-on; an image of it is made from this binary).
coredns_bin() {
	if [ -x "$KBIN/coredns" ] && grep -qF "CoreDNS-${COREDNS_VERSION#v}" <<<"$(printed "$KBIN/coredns" -version)"; then return 0; fi
	log "building CoreDNS $COREDNS_VERSION"
	local d
	d=$(mktemp -d)
	(
		cd "$d"
		export GOFLAGS=-mod=mod CGO_ENABLED=0
		go mod init x >/dev/null 2>&1
		go get "github.com/coredns/coredns@$COREDNS_VERSION" >/dev/null 2>&1
		mkdir -p "$KBIN"
		go build -ldflags "-s -w" -o "$KBIN/coredns" github.com/coredns/coredns
	)
	rm -rf "$d"
	grep -qF "CoreDNS-${COREDNS_VERSION#v}" <<<"$(printed "$KBIN/coredns" -version)" || {
		log "the coredns built says: $(printed "$KBIN/coredns" -version)"
		return 1
	}
}

# flanneld $FLANNEL_VERSION (the pod network of the kubeadm cluster, issue 47), static,
# beside the release's binaries. flannel's main.go imports every backend; two cannot
# be built here: tencentvpc needs a tencentcloud SDK module the proxy refuses (403)
# and udp needs cgo. So its main.go is built in a throwaway module without those
# two imports (vxlan, host-gw, ipip, wireguard, ipsec, extension stay). flannel's CNI
# plugin (github.com/flannel-io/cni-plugin) is not served either: the cluster uses
# the standard bridge + host-local plugins configured from flanneld's subnet.env.
flannel_bin() {
	if [ -x "$KBIN/flanneld" ] && grep -qxF "$FLANNEL_VERSION" <<<"$("$KBIN/flanneld" --version 2>&1 || true)"; then return 0; fi
	log "building flanneld $FLANNEL_VERSION (about 2 minutes)"
	local d
	d=$(mktemp -d)
	(
		cd "$d"
		export GOFLAGS=-mod=mod CGO_ENABLED=0
		go mod init x >/dev/null 2>&1
		go mod download "github.com/flannel-io/flannel@$FLANNEL_VERSION"
		src=$(go mod download -json "github.com/flannel-io/flannel@$FLANNEL_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
		grep -v -e '"github.com/flannel-io/flannel/pkg/backend/tencentvpc"' -e '"github.com/flannel-io/flannel/pkg/backend/udp"' \
			"$src/main.go" >main.go
		go mod edit -require="github.com/flannel-io/flannel@$FLANNEL_VERSION"
		go mod tidy >/dev/null 2>&1
		mkdir -p "$KBIN"
		go build -ldflags "-s -w -X github.com/flannel-io/flannel/pkg/version.Version=$FLANNEL_VERSION" -o "$KBIN/flanneld" .
	)
	rm -rf "$d"
	grep -qxF "$FLANNEL_VERSION" <<<"$("$KBIN/flanneld" --version 2>&1 || true)" || {
		log "the flanneld built says: $("$KBIN/flanneld" --version 2>&1 || true)"
		return 1
	}
}

# k8s_require module: the version of module that k8s.io/kubernetes $KUBELET_VERSION's
# go.mod requires (from the module cache; the proxy the first time).
k8s_require() {
	local gomod
	gomod=$(cd / && GONOSUMDB=k8s.io/kubernetes GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@$KUBELET_VERSION" |
		sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
	awk -v m="$1" '$1 == m && $2 ~ /^v/ { print $2; exit }' "$gomod"
}

# etcd of the version Kubernetes $KUBELET_VERSION's go.mod uses (or $ETCD_VERSION),
# beside that release's control plane. etcd.version says which it is: a binary of
# another etcd release is rebuilt.
etcd_bin() {
	local want=$ETCD_VERSION
	if [ -z "$want" ] && [ -x "$KBIN/etcd" ] && [ -f "$KBIN/etcd.version" ]; then return 0; fi
	[ -n "$want" ] || want=$(k8s_require go.etcd.io/etcd/server/v3)
	[ -n "$want" ] || { log "no go.etcd.io/etcd/server/v3 in k8s.io/kubernetes@$KUBELET_VERSION's go.mod"; return 1; }
	if [ -x "$KBIN/etcd" ] && [ "$(cat "$KBIN/etcd.version" 2>/dev/null)" = "$want" ] &&
		grep -qxF "etcd Version: ${want#v}" <<<"$(printed "$KBIN/etcd" --version)"; then return 0; fi
	log "building etcd $want (for Kubernetes $KUBELET_VERSION)"
	local e
	e=$(mktemp -d)
	(
		cd "$e"
		export GOFLAGS=-mod=mod CGO_ENABLED=0
		go mod init x >/dev/null 2>&1
		go get "go.etcd.io/etcd/server/v3@$want" >/dev/null 2>&1
		mkdir -p "$KBIN"
		go build -o "$KBIN/etcd" go.etcd.io/etcd/server/v3
	)
	echo "$want" >"$KBIN/etcd.version"
	rm -rf "$e"
}

# The upstream e2e test binary of the same release (go test -c k8s.io/kubernetes/test/e2e,
# without vet: vet of its thousands of dependencies doubles the build), agnhost (the e2e
# tests' do-everything image binary, packed into an image by critest/images) and the ginkgo CLI of the version
# e2e.test is built with (a parallel run needs the two to match), all from one throwaway
# module. The release is written next to them: e2e.test and agnhost print none.
e2e_bins() {
	if [ -x "$KBIN/e2e.test" ] && [ -x "$KBIN/agnhost" ] && [ -x "$KBIN/ginkgo-e2e" ] && [ -f "$KBIN/agnhost-porter/localhost.key" ] &&
		[ -s "$KBIN/agnhost.version" ] &&
		[ "$(cat "$KBIN/e2e.test.version" 2>/dev/null)" = "$KUBELET_VERSION" ]; then return 0; fi
	log "building e2e.test, agnhost and ginkgo $KUBELET_VERSION (about 15 minutes, 4 GB of memory)"
	local d out
	d=$(mktemp -d)
	out=$(mktemp -d)
	(
		cd "$d"
		k8s_module k8s.io/kubernetes/test/e2e k8s.io/kubernetes/test/images/agnhost/netexec github.com/onsi/ginkgo/v2/ginkgo/command
		go build -o "$out/ginkgo-e2e" github.com/onsi/ginkgo/v2/ginkgo
		k8s_build "$out/agnhost" k8s.io/kubernetes/test/images/agnhost
		go test -c -vet=off -ldflags "$(k8s_ldflags)" -o "$out/e2e.test" k8s.io/kubernetes/test/e2e
		go list -m -f '{{.Version}}' github.com/onsi/ginkgo/v2 >"$out/ginkgo-e2e.version"
		# The image has porter's test certificate at /localhost.crt and /localhost.key
		# (netexec --tls-cert-file in the https lifecycle hook tests).
		local src
		src=$(go list -m -f '{{.Dir}}' k8s.io/kubernetes)/test/images/agnhost
		mkdir "$out/agnhost-porter"
		cp "$src"/porter/localhost.{crt,key} "$out/agnhost-porter/"
		# The image tag the release's e2e tests pull (test/utils/image/manifest.go's
		# Agnhost is the VERSION of test/images/agnhost): critest/images tags it so.
		cp "$src/VERSION" "$out/agnhost.version"
	)
	mkdir -p "$KBIN"
	rm -rf "$KBIN/agnhost-porter"
	for b in ginkgo-e2e ginkgo-e2e.version agnhost-porter agnhost.version agnhost e2e.test; do mv "$out/$b" "$KBIN/$b"; done
	echo "$KUBELET_VERSION" >"$KBIN/e2e.test.version"
	rm -rf "$d" "$out"
}

# runsc and its containerd shim from one gVisor commit, static (CGO_ENABLED=0). The
# version is written next to them: neither binary prints the module version.
#
# One line of the shim is changed at build time, in a copy of the module (go's
# -overlay may not replace files in the module cache): containerd-shim-runsc-v1 sets
# its daemon's oom_score_adj to -999 and fails to start when that is refused, which it
# always is on a node without CAP_SYS_RESOURCE (docs/operating.md: CAP_SYS_RESOURCE). The patched shim
# keeps the score it inherited instead of failing, as containerd's own runc shim does
# (it sets containerd's score + 1). shimd and containerd's CRI plugin use this one shim.
runsc_bins() {
	if [ -x "$BIN/runsc" ] && [ -x "$BIN/containerd-shim-runsc-v1" ] &&
		[ "$(cat "$BIN/runsc.version" 2>/dev/null)" = "$GVISOR_VERSION+oom" ]; then return 0; fi
	log "building runsc and containerd-shim-runsc-v1 (gvisor.dev/gvisor@$GVISOR_VERSION)"
	local d
	d=$(mktemp -d)
	(
		cd "$d"
		export GOFLAGS=-mod=mod CGO_ENABLED=0
		go mod init x >/dev/null 2>&1
		go get "gvisor.dev/gvisor@$GVISOR_VERSION" >/dev/null 2>&1
		go build -o "$BIN/runsc" gvisor.dev/gvisor/runsc
		local manager=gvisor/pkg/shim/v1/manager.go
		cp -r "$(go list -m -f '{{.Dir}}' gvisor.dev/gvisor)" gvisor
		chmod -R u+w gvisor
		sed -i 's/if err := sys.SetOOMScore(cmd.Process.Pid, oomScoreMax); err != nil {/if err := sys.SetOOMScore(cmd.Process.Pid, oomScoreMax); err != nil \&\& !os.IsPermission(err) {/' "$manager"
		if ! grep -q 'oomScoreMax); err != nil && !os.IsPermission(err)' "$manager"; then
			echo "tools: $manager of gvisor $GVISOR_VERSION changed: the oom_score_adj patch no longer applies" >&2
			exit 1
		fi
		go mod edit -replace gvisor.dev/gvisor=./gvisor
		go build -o "$BIN/containerd-shim-runsc-v1" gvisor.dev/gvisor/shim
		echo "$GVISOR_VERSION+oom" >"$BIN/runsc.version"
	)
	rm -rf "$d"
}

# CRIU $CRIU_VERSION, for checkpoint/restore: runc checkpoint and runc restore run the
# criu they find on PATH. Debian 12's criu 3.17 fails on kernels from 6.13 ("vdso:
# Unexpected rt vDSO area bounds") and trixie's binary package needs trixie's libc, so
# criu is built from trixie's source tarball (apt checks its hash) against bookworm's
# libraries. The deb-src entry for trixie is there for the download only: it is removed
# again, also when something fails, and apt's lists are updated without it. The binary
# is kept in $TOOLS/criu-$CRIU_VERSION and linked as $BIN/criu (first on the PATH the
# harness gives containerd and so its shims and runc) and as /usr/local/sbin/criu (ahead
# of Debian's /usr/sbin on root's PATH).
CRIU_BUILD_DEPS=(gcc make pkg-config xz-utils libprotobuf-dev libprotobuf-c-dev protobuf-c-compiler
	protobuf-compiler python3-protobuf libnl-3-dev libcap-dev uuid-dev libnet1-dev libbsd-dev
	libgnutls28-dev libnftables-dev)
criu_bin() {
	local dir=$TOOLS/criu-$CRIU_VERSION l
	local exe=$dir/sbin/criu
	if ! [ -x "$exe" ] || ! grep -qxF "Version: $CRIU_VERSION" <<<"$(printed "$exe" --version)"; then
		criu_build "$dir"
	fi
	for l in "$BIN/criu" /usr/local/sbin/criu; do
		[ "$(readlink "$l" 2>/dev/null)" = "$exe" ] && continue
		log "linking $l -> $exe"
		mkdir -p "$(dirname "$l")"
		ln -sfn "$exe" "$l"
	done
}

criu_build() { # install-dir
	local dir=$1
	log "building CRIU $CRIU_VERSION from Debian trixie's source package criu $CRIU_DEBIAN_VERSION (about a minute)"
	(
		# The archive the machine's bookworm packages come from.
		uri=$(apt-get indextargets --format '$(REPO_URI) $(RELEASE) $(TARGET_OF)' |
			awk '$2 == "bookworm" && $3 == "deb" { print $1; exit }')
		uri=${uri:-http://deb.debian.org/debian/}
		src=/etc/apt/sources.list.d/shimd-criu-trixie-src.sources
		d=$(mktemp -d)
		trap 'exit 1' INT TERM HUP
		trap 'rm -f "$src"; log "removed $src, apt-get update"; apt-get update -qq || log "apt-get update failed"; rm -rf "$d"' EXIT
		log "adding $src ($uri trixie), apt-get update"
		printf '%s\n' "# Added by shimd's hack/tools.sh criu for the download of criu's source; removed after it." \
			"Types: deb-src" "URIs: ${uri%/}" "Suites: trixie" "Components: main" \
			"Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg" >"$src"
		apt-get update -qq
		mapfile -t missing < <(missing_debs "${CRIU_BUILD_DEPS[@]}")
		if [ ${#missing[@]} -gt 0 ]; then
			log "apt-get install ${missing[*]}"
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
		fi
		cd "$d"
		# apt downloads as _apt, which may not write to root's mktemp directory.
		chown _apt "$d" 2>/dev/null || true
		apt-get source -qq --download-only --tar-only "criu=$CRIU_DEBIAN_VERSION" >/dev/null
		tar xf criu_"$CRIU_VERSION".orig.tar.*
		cd "criu-$CRIU_VERSION"
		if ! nice make -j2 criu >"$d/build.log" 2>&1; then
			tail -n 40 "$d/build.log" >&2
			exit 1
		fi
		rm -rf "$dir.new"
		if ! make install-criu PREFIX="$dir.new" >>"$d/build.log" 2>&1; then
			tail -n 40 "$d/build.log" >&2
			exit 1
		fi
		grep -qxF "Version: $CRIU_VERSION" <<<"$(printed "$dir.new/sbin/criu" --version)" || {
			log "the criu built says: $(printed "$dir.new/sbin/criu" --version)"
			exit 1
		}
		rm -rf "$dir"
		mv "$dir.new" "$dir"
		log "installed $dir/sbin/criu"
	)
}

# The sample API server of the release (k8s.io/sample-apiserver, its staging module at
# v0.$minor.$patch): the [Conformance] aggregator tests run it from
# registry.k8s.io/e2e-test-images/sample-apiserver, which critest/images packs
# (mkimages -conformance). Apart from e2e_bins, whose cache it leaves alone.
sample_apiserver_bin() {
	if [ -x "$KBIN/sample-apiserver" ] && [ "$(cat "$KBIN/sample-apiserver.version" 2>/dev/null)" = "$KUBELET_VERSION" ]; then return 0; fi
	log "building sample-apiserver $KUBELET_VERSION (a few minutes)"
	local d
	d=$(mktemp -d)
	(
		cd "$d"
		export GOFLAGS=-mod=mod CGO_ENABLED=0
		go mod init x >/dev/null 2>&1
		go get "k8s.io/sample-apiserver@v0${KUBELET_VERSION#v1}"
		k8s_build "$d/sample-apiserver.bin" k8s.io/sample-apiserver
	)
	mkdir -p "$KBIN"
	mv "$d/sample-apiserver.bin" "$KBIN/sample-apiserver"
	echo "$KUBELET_VERSION" >"$KBIN/sample-apiserver.version"
	rm -rf "$d"
}

case "${1:-all}" in
debs) debs ;;
containerd) containerd_bins ;;
containerd-profiled) containerd_profiled_bin ;;
runc) runc_bin ;;
critools) critools ;;
kubelet) kube_bins kubelet ;;
runsc) runsc_bins ;;
criu) criu_bin ;;
cluster) kube_bins "${KUBE_BINS[@]}"; etcd_bin ;;
e2e) e2e_bins ;;
sample-apiserver) sample_apiserver_bin ;;
kubeadm) kube_bins kubeadm kube-proxy; coredns_bin; flannel_bin ;;
all) debs; containerd_bins; runc_bin; criu_bin; critools; kube_bins "${KUBE_BINS[@]}" kubeadm kube-proxy; etcd_bin; coredns_bin; flannel_bin ;;
*) echo "usage: $0 debs|containerd|containerd-profiled|runc|critools|kubelet|runsc|criu|cluster|kubeadm|e2e|sample-apiserver|all" >&2; exit 2 ;;
esac
