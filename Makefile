# shimd: a Kubernetes CRI runtime on containerd, runc and CNI.
GO      ?= go
PREFIX  ?= /usr/local
# A tag's `git describe` (v0.2.0-3-gabc1234), else the source's base version with the
# commit as build metadata (0.1.0-dev+abc1234-dirty): the kubelet parses the version
# shimd reports as a semantic version and shows "Unknown" when it cannot.
VERSION ?= $(shell git describe --tags --dirty 2>/dev/null || { c=$$(git describe --always --dirty 2>/dev/null) && echo "0.1.0-dev+$$c"; } || echo 0.1.0-dev)
LDFLAGS := -X main.version=$(VERSION)
# nri_no_wasm: NRI plugins are processes on the NRI socket; leaving out the WASM
# plugin engine (wazero) makes the daemon 1.5 MiB smaller in memory.
TAGS    := nri_no_wasm
BIN     := bin/shimd
# The e2e tests also run against Debian's containerd 1.6 (smoke run).
SMOKE_1_6 := TestSandboxLifecycle|TestHostNetworkPod|TestKill9RestartRecoversSandboxes|TestCrictlPods|TestInvalidRequests|TestImagePullListStatusRemove|TestPullVerifiesStreamedLayers|TestContainerLifecycle|TestContainerEvents|TestImageVolumes|TestKill9DuringPullLeavesNothing|TestUpdateContainerResourcesSurvivesRestart|TestKill9DuringStopPodSandboxLeavesNothing|TestContainerdKilledDuringShimStartLeavesNoShim|TestKill9DuringStartContainerRetrySucceeds|TestLeftoverCgroupsRemoved|TestCreateContainerRetryAfterKill9|TestContainersRunInTheirPodsShim|TestCNIConfigFollowsTheNode|TestSystemdNotifyReadyAfterRecovery|TestMetricsDuringPodLifecycle|TestCDIDevices|TestCRIPodSandboxMetrics|TestNRIPluginsSeeEventsAndAdjustContainers|TestContainerdCallsPerPod|TestImageChangesByOtherClientsAreSeen|TestStuckShimIsKilled|TestPauselessPod|TestPauselessPodNotReadyWhenPinGone|TestPauselessModeKeepsPauseWhenNeeded|TestPauselessExitWhileContainerdDown|TestPauselessStartsOfContainersThatExitAtOnce|TestPauselessChainOfContainersThatExitAtOnce|TestExitWhileShimdAndContainerdDown

.PHONY: all build check test integration integration-1.6 bench install run tools pause clean fuzz

all: build

build:
	$(GO) build -trimpath -tags $(TAGS) -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/shimd

# Everything CI runs: tools, vet, unit and integration tests, then the skipped tests
# counted by reason; a skip that hack/ci-skips.txt does not allow fails the run (a
# test that must run on CI's host class stopped running). hack/gotest.sh runs go test
# -json, prints what plain go test prints and records the skips in $(SKIPS_DIR).
SKIPS_DIR := bin/test-skips
GOTEST    := GO=$(GO) SHIMD_SKIPS_DIR=$(SKIPS_DIR) bash hack/gotest.sh
check: tools
	rm -rf $(SKIPS_DIR)
	@unformatted=$$("$$($(GO) env GOROOT)/bin/gofmt" -l .); \
		if [ -n "$$unformatted" ]; then echo "not gofmt-formatted:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags integration ./...
	$(GOTEST) unit -count=1 ./...
	$(GOTEST) integration -tags integration -count=1 -p 1 -timeout 40m ./...
	$(MAKE) integration-1.6
	$(MAKE) e2e-cgroupv2-smoke
	$(GO) run ./hack/testsum -report -expected hack/ci-skips.txt $(SKIPS_DIR)/*.jsonl

# Unit tests: pure logic, no root, no containerd.
test:
	$(GO) test ./...

# Fuzz the request validators and the pure spec builder, one target at a time
# (FUZZTIME each; the corpus grows in the Go build cache). No root needed.
FUZZTIME ?= 20s
FUZZ_TARGETS := runtime:FuzzValidateSandboxConfig runtime:FuzzValidateContainerConfig \
	runtime:FuzzNamesAndSysctls spec:FuzzContainer container:FuzzTreePaths \
	container:FuzzLogLines
fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; fn=$${t#*:}; echo "== $$pkg $$fn"; \
		$(GO) test -run '^$$' -fuzz "^$$fn\$$" -fuzztime $(FUZZTIME) ./$$pkg/; \
	done

# Integration tests: root; real containerd 2.4.2 + runc 1.5.2 + CNI plugins, started on
# private sockets and directories by critest/harness. `make tools` installs them.
integration: tools
	$(GO) test -tags integration -count=1 -p 1 -timeout 30m ./...

# The same against Debian's containerd 1.6 and runc 1.1.
integration-1.6:
	SHIMD_CONTAINERD=1.6 $(GOTEST) integration-1.6 -tags integration -count=1 -timeout 20m -run '$(SMOKE_1_6)' ./critest/e2e/

# The cgroup v2 node users run (critest/vm, docs/testing.md "The cgroup v2 guest"): a
# Debian 12 guest under QEMU (software emulation) with systemd as PID 1, pure cgroup v2,
# shimd installed by `make install` with the systemd cgroup driver. vm-cgroupv2 builds
# (cached) and boots it in the background; vm-shell and vm-stop drive it.
VM_DIR    ?= /var/tmp/shimd-vm
VM_DRIVER ?= systemd
VMCTL     := $(GO) run ./critest/vm/cmd/vmctl -dir $(VM_DIR)
.PHONY: vm-cgroupv2 vm-shell vm-stop e2e-cgroupv2 e2e-cgroupv2-smoke e2e-selinux
vm-cgroupv2:
	$(VMCTL) -cgroup-driver $(VM_DRIVER) up
	$(VMCTL) run 'echo "guest: /sys/fs/cgroup is $$(stat -fc %T /sys/fs/cgroup), PID 1 is $$(cat /proc/1/comm)"; crictl version'
vm-shell:
	$(VMCTL) shell
vm-stop:
	$(VMCTL) stop

# shimd's tests inside that guest (critest/cgroupv2), each pass with its own boot: the
# systemd cgroup driver with critest in the guest too, then cgroupfs. The smoke run
# (in make check, about 12 minutes): limits, OOM, stats, a kubelet static pod, the
# AppArmor default profile and the stats beside containerd's CRI, with the systemd
# driver.
E2E_CGROUPV2_TIMEOUT ?= 150m
SMOKE_CGROUPV2 := TestLimitsAsCgroupV2Files|TestOOMKillsTheWholeGroup|TestStatsOnCgroupV2|TestKubeletStaticPod|TestAppArmorRuntimeDefault|TestStatsMatchContainerdOnCgroupV2
e2e-cgroupv2: tools
	SHIMD_VM=1 SHIMD_VM_CRITEST=1 SHIMD_VM_CGROUP_DRIVER=systemd $(GO) test -tags integration -count=1 -timeout $(E2E_CGROUPV2_TIMEOUT) -v ./critest/cgroupv2/
	SHIMD_VM=1 SHIMD_VM_CGROUP_DRIVER=cgroupfs $(GO) test -tags integration -count=1 -timeout $(E2E_CGROUPV2_TIMEOUT) -v ./critest/cgroupv2/
e2e-cgroupv2-smoke: tools
	SHIMD_VM=1 SHIMD_VM_CGROUP_DRIVER=systemd $(GOTEST) e2e-cgroupv2-smoke -v -tags integration -count=1 -timeout 30m -run '$(SMOKE_CGROUPV2)' ./critest/cgroupv2/

# The SELinux guest (critest/vm/image-selinux.sh: the cgroup v2 guest with Debian's
# SELinux, enforcing, shimd's enable_selinux on) and shimd's SELinux tests in it.
e2e-selinux: tools
	SHIMD_VM=1 SHIMD_VM_SELINUX=1 SHIMD_VM_CGROUP_DRIVER=systemd $(GOTEST) e2e-selinux -v -tags integration -count=1 -timeout 30m -run 'TestSELinux' ./critest/cgroupv2/

# Pod lifecycle through shimd and through containerd's own CRI plugin, same machine.
# It includes BenchmarkPolling at POLL_PODS and POLL_WINDOW (below): about 15 minutes
# of the run at the defaults.
bench: tools
	$(GO) test -tags integration -count=1 -run '^$$' -bench . -benchtime 1x -timeout 90m ./critest/bench/

# Bursts only (BenchmarkBurst): BENCH_BURST_PODS (sizes, default 100,200) pods at once.
.PHONY: bench-burst
bench-burst: tools
	$(GO) test -tags integration -count=1 -run '^$$' -bench BenchmarkBurst -benchtime 1x -timeout 60m ./critest/bench/

# Only the steady-state polling benchmark: a kubelet's list, stats and status calls on
# N running pods for POLL_WINDOW, for each N in POLL_PODS, beside containerd's CRI.
POLL_PODS   ?= 110,250
POLL_WINDOW ?= 60s
.PHONY: bench-poll
bench-poll: tools
	POLL_PODS=$(POLL_PODS) POLL_WINDOW=$(POLL_WINDOW) $(GO) test -tags integration -count=1 -run '^$$' -bench BenchmarkPolling -benchtime 1x -timeout 45m -v ./critest/bench/

# Pulls at scale (BenchmarkPullScale): a large image of real files, 5 images at once, the
# same through a slow link (PULL_SLOW_MIBS), a stalled blob; cold, beside containerd's CRI.
# Its layers are built once into /var/cache/shimd/bench-pull (PULL_CACHE).
.PHONY: bench-pull bench-density
bench-pull: tools
	$(GO) test -tags integration -count=1 -run '^$$' -bench BenchmarkPullScale -benchtime 1x -timeout 60m ./critest/bench/

# What the kubelet sees (BenchmarkKubeletDensity): a Deployment of BENCH_DENSITY_PODS
# (110) pods on the one-node cluster, BENCH_DENSITY_STEADY_S (300) s of steady state,
# on shimd (BENCH_PAUSE's mode) and on containerd's CRI. About 20 minutes.
bench-density: tools
	bash hack/tools.sh cluster && $(GO) test -tags integration -count=1 -run '^$$' -bench BenchmarkKubeletDensity -benchtime 1x -timeout 60m -v ./critest/bench/

# shimd's default is sandbox.pause = "when-needed" (docs/operating.md "Pause-less pods"):
# the kubelet's pods, and the benchmarks' (which are the kubelet's kind), run without a
# pause container. The *-pause-always targets run the same with a pause container in
# every shimd pod, as containerd's CRI plugin has (bench-pause-always: shimd's pods
# beside containerd's, both with a pause). integration-pauseless runs the e2e suite's
# own pods pause-less too (by default they share their PID namespace, so keep a pause).
.PHONY: bench-pause-always critest-pause-always e2e-kubelet-pause-always integration-pauseless
bench-pause-always: tools
	BENCH_PAUSE=always $(GO) test -tags integration -count=1 -run '^$$' -bench . -benchtime 1x -timeout 90m ./critest/bench/

critest-pause-always: tools
	SHIMD_PAUSE=always $(GO) test -tags integration -count=1 -timeout 60m -run TestCritest -v ./critest/conformance/

e2e-kubelet-pause-always: tools
	bash hack/tools.sh kubelet && SHIMD_PAUSE=always $(GO) test -tags integration -count=1 -timeout 30m -run TestKubelet -v ./critest/kubelet/

integration-pauseless: tools
	SHIMD_PAUSE=when-needed $(GO) test -tags integration -count=1 -p 1 -timeout 40m ./critest/e2e/

# critest v1.37.0 against shimd, offline, with its NRI specs (critest/README.md). CRITEST_FOCUS, CRITEST_PARALLEL.
.PHONY: critest critest-soak critest-runsc integration-runsc
critest: tools
	$(GO) test -tags integration -count=1 -timeout 60m -run TestCritest -v ./critest/conformance/

# The suite 3 times in one environment, then nothing may be left behind.
critest-soak: tools
	CRITEST_RUNS=3 $(GO) test -tags integration -count=1 -timeout 60m -run TestCritest -v ./critest/conformance/

# gVisor: runsc and its shim are not part of `make tools`: hack/tools.sh runsc builds
# them in about 7 minutes from a cold build cache here (450 CPU-seconds, so at least
# 4 minutes on an idle 2-core machine); without them the runsc tests skip themselves.
# critest -runtime-handler=runsc against shimd and against containerd's own CRI plugin
# with the same runsc; fails on a spec only shimd fails (critest/README.md).
critest-runsc: tools
	bash hack/tools.sh runsc
	CRITEST_RUNSC=1 $(GO) test -tags integration -count=1 -timeout 60m -run TestCritestRunsc -v ./critest/conformance/

# The e2e tests of pods on the runsc handler.
integration-runsc: tools
	bash hack/tools.sh runsc
	$(GO) test -tags integration -count=1 -p 1 -timeout 20m -run 'TestGVisor' ./critest/e2e/

# Pod lifecycles while shimd and containerd are killed at random (CRASH_SOAK_ROUNDS,
# CRASH_SOAK_SEED), then the full leak check; its last line counts lost pods and
# containers and each kind of leak. make check runs a short one (12 crashes).
.PHONY: crash-soak cluster-soak
crash-soak: tools
	CRASH_SOAK_ROUNDS=$${CRASH_SOAK_ROUNDS:-200} $(GO) test -tags integration -count=1 -timeout 60m -run TestCrashSoak -v ./critest/e2e/

# A container whose liveness probe always fails, restarted 5 times by a real kubelet on
# shimd and on containerd's CRI plugin: each restart must be what the kubelet's
# crash-loop back-off rule gives for the attempts' times as the runtime reports them
# (issue 32). LIVENESS_FAILURE_THRESHOLD (default 3) sets the probe's threshold;
# KUBELET_VERSION picks another kubelet (v1.34.12 was the issue's).
.PHONY: e2e-liveness-backoff
e2e-liveness-backoff: tools
	bash hack/tools.sh kubelet && SHIMD_LIVENESS_BACKOFF=1 $(GO) test -tags integration -count=1 -timeout 20m -run TestKubeletLivenessBackoff -v ./critest/bench/

# Upgrade in place: shimd built at UPGRADE_FROM (a git revision of this repository's
# history) runs pods, then the current build takes over its state (TestUpgradeInPlace;
# docs/operating.md, "Upgrading with pods running").
UPGRADE_FROM ?= 9014ae4
.PHONY: upgrade-test
upgrade-test: tools
	SHIMD_UPGRADE_FROM=$(UPGRADE_FROM) $(GO) test -tags integration -count=1 -timeout 20m -run TestUpgradeInPlace -v ./critest/e2e/

# kill -9 of shimd at a random moment of a Deployment's rollout on the one-node
# cluster, SHIMD_CLUSTER_SOAK rounds (default 20, about 40 s each); after each round
# shimd must account for every containerd container and IP lease. SHIMD_SOAK_SEED
# repeats a run's timing.
cluster-soak: tools
	bash hack/tools.sh cluster && SHIMD_CLUSTER_SOAK=$${SHIMD_CLUSTER_SOAK:-20} $(GO) test -tags integration -count=1 -timeout 60m -run TestClusterKill9Soak -v ./critest/cluster/

# 1000 pod lifecycles, then shimd's goroutines, descriptors and live heap must be
# back at their baseline (GROWTH_LIFECYCLES; make check runs 40).
.PHONY: e2e-growth
e2e-growth: tools
	GROWTH_LIFECYCLES=$${GROWTH_LIFECYCLES:-1000} $(GO) test -tags integration -count=1 -timeout 60m -run TestNoGrowthAfterPodLifecycles -v ./critest/e2e/

# A real kubelet v1.37.2 (standalone, static pods) on shimd (critest/kubelet). The first
# run builds the kubelet (about 6 minutes, cached in /var/cache/shimd/tools/bin/k8s-v1.37.2).
# KUBELET_VERSION picks another release, for hack/tools.sh and the tests alike.
.PHONY: e2e-kubelet e2e-kubelet-skew
e2e-kubelet: tools
	bash hack/tools.sh kubelet && $(GO) test -tags integration -count=1 -timeout 30m -run TestKubelet -v ./critest/kubelet/

# Skew smoke: TestKubelet (every step, about 2 minutes) on kubelet v1.34.12, the
# release the tests ran before v1.37.2; its first run builds that kubelet (about
# 6 minutes, 20 s with a warm Go build cache).
SKEW_KUBELET_VERSION ?= v1.34.12
e2e-kubelet-skew: tools
	KUBELET_VERSION=$(SKEW_KUBELET_VERSION) bash hack/tools.sh kubelet && \
		KUBELET_VERSION=$(SKEW_KUBELET_VERSION) $(GO) test -tags integration -count=1 -timeout 15m -run 'TestKubelet$$' -v ./critest/kubelet/

# A one-node cluster (etcd, kube-apiserver, controller manager, scheduler, kubelet
# v1.37.2, kubectl) on shimd, driven with kubectl (critest/cluster). The first run
# builds the control plane (about 10 minutes, cached in /var/cache/shimd/tools/bin/k8s-v1.37.2).
.PHONY: e2e-cluster
e2e-cluster: tools
	bash hack/tools.sh cluster && $(GO) test -tags integration -count=1 -timeout 40m -run TestCluster -v ./critest/cluster/

# A kubeadm cluster of 2 nodes on shimd, offline (critest/kubeadm, issue 47): kubeadm
# init and join, static control plane, flannel, kube-proxy, CoreDNS; pod to pod across
# nodes, a Service by ClusterIP and DNS name, exec, logs, port-forward; kubeadm reset
# and nothing left on the host (TestKubeadmSmoke, about a minute); shimd restart,
# containerd kill -9 and drain on a worker (TestKubeadmNodeLifecycle, about 1.5
# minutes); a node moved from containerd's CRI to shimd (TestKubeadmMoveNodeToShimd,
# about a minute). The kubeadm image set (mkimages -kubeadm) takes 17 s the first time.
# Not yet part of check.
# The kubelet's image GC and eviction on a split image filesystem (two loop-mounted
# filesystems, the one-node cluster; about 8 minutes): docs/testing.md.
.PHONY: e2e-split-imagefs
e2e-split-imagefs: tools
	SHIMD_SPLIT_IMAGEFS_CLUSTER=1 $(GO) test -tags integration -count=1 -timeout 30m -run TestClusterSplitImageFilesystem -v ./critest/cluster/

.PHONY: e2e-kubeadm
e2e-kubeadm: tools
	bash hack/tools.sh cluster && bash hack/tools.sh kubeadm && \
		$(GO) test -tags integration -count=1 -timeout 20m -run TestKubeadm -v ./critest/kubeadm/

# The same cluster with a node in the cgroup v2 + systemd guest (critest/vm) bridged
# onto the node network: both host classes in one cluster (TestKubeadmGuestNode, issue
# 47). The guest runs under QEMU's software emulation: about 3 minutes, most of a
# 2-core machine. Not part of check.
.PHONY: e2e-kubeadm-guest
e2e-kubeadm-guest: tools
	bash hack/tools.sh cluster && bash hack/tools.sh kubeadm && \
		SHIMD_KUBEADM_GUEST=1 $(GO) test -tags integration -count=1 -timeout 60m -run TestKubeadmGuestNode -v ./critest/kubeadm/

# The upstream Kubernetes v1.37.2 e2e tests focused on [NodeConformance] against the
# one-node cluster, offline (critest/cluster, skips in critest/skip-node-conformance).
# Not part of check. v1.37.2 has 389 such tests (v1.34.12: 166), 127 of them [Slow]
# in-place resizes of about a minute each: the run takes about 85 minutes. The first
# run builds e2e.test, agnhost and the ginkgo CLI of the same version (hack/tools.sh
# e2e, about 15 minutes, 4 GB of memory);
# NODE_CONFORMANCE_PARALLEL (default 4), NODE_CONFORMANCE_FOCUS, NODE_CONFORMANCE_REPORT_DIR.
.PHONY: node-conformance
node-conformance: tools
	bash hack/tools.sh cluster && bash hack/tools.sh e2e && \
		SHIMD_NODE_CONFORMANCE=1 $(GO) test -tags integration -count=1 -timeout 150m -run TestNodeConformance -v ./critest/cluster/

# The Kubernetes [Conformance] suite (e2e.test v1.37.2) over a kubeadm cluster of 3
# nodes on shimd, offline (critest/kubeadm TestKubeadmConformance, issue 47): the
# control-plane node keeps kubeadm's taint, the 2 workers take the tests' pods. Two
# passes as upstream's conformance jobs: not [Serial] with KUBEADM_CONFORMANCE_PARALLEL
# ginkgo processes (default 2), then [Serial] in one; [Disruptive] and [Flaky] skipped.
# Prints ginkgo's summary of each pass; kubeadm reset and nothing left at the end. Not
# part of check: 49 minutes with KUBEADM_CONFORMANCE_PARALLEL=3 on 2 cores. The first
# run builds e2e.test (hack/tools.sh e2e, about 15 minutes) and the sample API server
# (hack/tools.sh sample-apiserver).
# KUBEADM_CONFORMANCE_FOCUS narrows it, KUBEADM_CONFORMANCE_SERIAL=0 drops the serial
# pass (=only: runs it alone), KUBEADM_CONFORMANCE_REPORT_DIR keeps the reports (default
# /var/tmp/shimd-kubeadm-conformance), SHIMD_KUBEADM_CRI=containerd runs the same
# cluster on containerd's CRI.
CONFORMANCE_TIMEOUT ?= 8h
.PHONY: conformance
conformance: tools
	bash hack/tools.sh cluster && bash hack/tools.sh kubeadm && bash hack/tools.sh e2e && \
		bash hack/tools.sh sample-apiserver && SHIMD_KUBEADM_CONFORMANCE=1 $(GO) test -tags integration -count=1 -timeout $(CONFORMANCE_TIMEOUT) -run TestKubeadmConformance -v ./critest/kubeadm/

tools:
	bash hack/tools.sh all

pause:
	$(MAKE) -C sandbox/pause

# The binary, the systemd unit (hack/systemd; started only by systemctl), the containerd
# drop-in hack/run.sh uses when it installs containerd for shimd, and a commented default
# config (an existing config is kept).
SYSCONFDIR ?= /etc
UNITDIR    ?= /etc/systemd/system
install: build
	install -D -m 0755 $(BIN) $(DESTDIR)$(PREFIX)/bin/shimd
	install -d $(DESTDIR)$(UNITDIR) $(DESTDIR)$(SYSCONFDIR)/shimd $(DESTDIR)$(PREFIX)/share/shimd
	sed -e 's#@BINDIR@#$(PREFIX)/bin#g' -e 's#@CONFIG@#$(SYSCONFDIR)/shimd/config.toml#g' \
		hack/systemd/shimd.service >$(DESTDIR)$(UNITDIR)/shimd.service
	install -m 0644 hack/systemd/containerd.service.d/10-shimd.conf $(DESTDIR)$(PREFIX)/share/shimd/containerd-10-shimd.conf
	@if [ -e $(DESTDIR)$(SYSCONFDIR)/shimd/config.toml ]; then \
		echo "keeping $(DESTDIR)$(SYSCONFDIR)/shimd/config.toml"; \
	else \
		$(BIN) config default --commented >$(DESTDIR)$(SYSCONFDIR)/shimd/config.toml; \
	fi

# Set up this machine (Debian 12) and run shimd in the foreground-less way README shows.
run: build
	bash hack/run.sh

clean:
	rm -rf bin
