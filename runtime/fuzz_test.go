package runtime

import (
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/pod"
	"github.com/shimd/shimd/spec"
)

// requireClassified fails on an error that is not InvalidArgument: validators only
// ever refuse a request as malformed.
func requireClassified(t *testing.T, err error) {
	t.Helper()
	if err != nil && !errdefs.IsInvalidArgument(err) {
		t.Fatalf("not InvalidArgument: %v", err)
	}
}

// FuzzValidateSandboxConfig: any PodSandboxConfig (decoded from arbitrary protobuf
// bytes) is accepted or refused with InvalidArgument, never a panic; an accepted one
// has metadata that cannot smuggle CNI_ARGS.
func FuzzValidateSandboxConfig(f *testing.F) {
	seeds := []*runtimeapi.PodSandboxConfig{validConfig(), {},
		{Metadata: &runtimeapi.PodSandboxMetadata{Name: "x;IP=198.19.77.250", Namespace: "d", Uid: "u"}},
		{Metadata: &runtimeapi.PodSandboxMetadata{Name: "a", Namespace: "b", Uid: "c"}, Hostname: "h", LogDirectory: "/var/log/pods/x",
			DnsConfig:    &runtimeapi.DNSConfig{Servers: []string{"10.0.0.1"}, Searches: []string{"svc"}, Options: []string{"ndots:5"}},
			PortMappings: []*runtimeapi.PortMapping{{ContainerPort: 80, HostPort: 8080, HostIp: "127.0.0.1"}},
			Linux: &runtimeapi.LinuxPodSandboxConfig{CgroupParent: "/kubepods", Sysctls: map[string]string{"net/ipv4/ip_forward": "1", "kernel.shmmax": "1"},
				SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: &runtimeapi.NamespaceOption{
					UsernsOptions: &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD,
						Uids: []*runtimeapi.IDMapping{{ContainerId: 0, HostId: 65536, Length: 65536}},
						Gids: []*runtimeapi.IDMapping{{ContainerId: 0, HostId: 65536, Length: 65536}}}}},
				Overhead: &runtimeapi.LinuxContainerResources{CpuShares: 2, MemoryLimitInBytes: -1}}},
	}
	for _, s := range seeds {
		b, _ := proto.Marshal(s)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg := &runtimeapi.PodSandboxConfig{}
		if proto.Unmarshal(data, cfg) != nil {
			return
		}
		err := validateSandboxConfig(cfg)
		requireClassified(t, err)
		if err == nil {
			md := cfg.GetMetadata()
			if strings.ContainsAny(md.GetName()+md.GetNamespace()+md.GetUid(), ";=_/ \x00") {
				t.Fatalf("accepted metadata %q", md)
			}
		}
	})
}

// FuzzValidateContainerConfig: any ContainerConfig is accepted or refused with
// InvalidArgument, on a cgroup v1 and a cgroup v2 node.
func FuzzValidateContainerConfig(f *testing.F) {
	full := validContainer()
	full.Mounts = []*runtimeapi.Mount{{HostPath: "/srv", ContainerPath: "/proc/meminfo"}, {ContainerPath: "/x", Image: &runtimeapi.ImageSpec{Image: "i"}}}
	full.Devices = []*runtimeapi.Device{{HostPath: "/dev/null", ContainerPath: "/dev/n", Permissions: "rwm"}}
	full.Envs = []*runtimeapi.KeyValue{{Key: "A", Value: []byte("b")}}
	full.Linux.Resources = &runtimeapi.LinuxContainerResources{CpusetCpus: "0-1", CpusetMems: "0", CpuQuota: -1,
		Unified: map[string]string{"memory.high": "1"}, HugepageLimits: []*runtimeapi.HugepageLimit{{PageSize: "2MB"}}}
	full.Linux.SecurityContext.Capabilities = &runtimeapi.Capability{AddCapabilities: []string{"ALL"}, DropCapabilities: []string{"cap_chown"}}
	runcRefuses := validContainer() // each part of it refused by runc at start once
	runcRefuses.WorkingDir = "/" + strings.Repeat("w", 256)
	runcRefuses.Linux.SecurityContext.MaskedPaths = []string{"/proc/kcore", "/proc/a\x00b"}
	runcRefuses.Linux.SecurityContext.ReadonlyPaths = []string{"proc/sys", ""}
	runcRefuses.Linux.Resources = &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 1, MemorySwapLimitInBytes: 1 << 20,
		Unified: map[string]string{"cgroup.procs": "1", "memory/../x": "1", "memory.high": "1\n2"}}
	for _, s := range []*runtimeapi.ContainerConfig{validContainer(), full, runcRefuses, {}} {
		b, _ := proto.Marshal(s)
		f.Add(b, false)
	}
	f.Fuzz(func(t *testing.T, data []byte, unified bool) {
		cfg := &runtimeapi.ContainerConfig{}
		if proto.Unmarshal(data, cfg) != nil {
			return
		}
		node := testNode
		node.UnifiedCgroups = unified
		err := validateContainerConfig(cfg, node)
		requireClassified(t, err)
		if err == nil {
			requireRuncCanStart(t, cfg, unified)
		}
		requireClassified(t, validateResources("linux", cfg.GetLinux().GetResources(), node))
	})
}

// requireRuncCanStart: an accepted config has none of what runc refuses at start
// without looking at the node or the image: a memory limit it cannot set, a swap limit
// the kernel refuses, a masked or read-only path it cannot look up; nor a unified key
// outside the container's cgroup or on a cgroup core file, nor a value with NUL.
func requireRuncCanStart(t *testing.T, cfg *runtimeapi.ContainerConfig, unified bool) {
	t.Helper()
	r := cfg.GetLinux().GetResources()
	for k, v := range r.GetUnified() {
		if strings.ContainsAny(k, "/\x00 ") || strings.HasPrefix(k, "cgroup.") || strings.ContainsRune(v, 0) {
			t.Fatalf("accepted unified %q: %q", k, v)
		}
	}
	if m := r.GetMemoryLimitInBytes(); m > 0 && m < spec.MinMemoryLimit {
		t.Fatalf("accepted a memory limit of %d bytes", m)
	}
	if swap, m := r.GetMemorySwapLimitInBytes(), r.GetMemoryLimitInBytes(); swap > 0 && (m == 0 || (m > 0 && swap < m) || (m < 0 && !unified)) {
		t.Fatalf("accepted memory %d with memory+swap %d", m, swap)
	}
	sc := cfg.GetLinux().GetSecurityContext()
	for _, p := range append(append([]string{cfg.GetWorkingDir()}, sc.GetMaskedPaths()...), sc.GetReadonlyPaths()...) {
		if strings.ContainsRune(p, 0) || len(p) > maxPathLen {
			t.Fatalf("accepted path %q", p)
		}
		for _, name := range strings.Split(p, "/") {
			if len(name) > maxPathNameLen {
				t.Fatalf("accepted path %q", p)
			}
		}
	}
	for _, p := range append(sc.GetMaskedPaths(), sc.GetReadonlyPaths()...) {
		if !strings.HasPrefix(p, "/") {
			t.Fatalf("accepted relative path %q", p)
		}
	}
}

// FuzzNamesAndSysctls: the name rules, sysctl rules and cpuset parser on arbitrary
// strings; an accepted sysctl is namespaced and its normal form is dotted.
func FuzzNamesAndSysctls(f *testing.F) {
	for _, s := range []string{"web-0", "x;IP=198.19.77.250", "-10", ".dev.mem1", "net/ipv4/conf/eno2.100/rp_filter",
		"kernel.shm_rmid_forced", "fs.mqueue.msg_max", "0-3,5", "1-", "a.b..c", strings.Repeat("a", 300)} {
		f.Add(s, uint8(0))
	}
	f.Fuzz(func(t *testing.T, s string, mode uint8) {
		for _, check := range []func(string, string) error{validateObjectName, validateNamespaceName, validateUID, validateID, noNUL} {
			requireClassified(t, check("f", s))
		}
		ns := &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode(mode % 3), Ipc: runtimeapi.NamespaceMode(mode / 3 % 3)}
		err := validateSysctls(&runtimeapi.LinuxPodSandboxConfig{Sysctls: map[string]string{s: "1"},
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: ns}})
		requireClassified(t, err)
		if err == nil && sysctlNamespace(pod.NormalizeSysctlName(s)) == "" {
			t.Fatalf("accepted sysctl %q outside a pod namespace", s)
		}
		if set, err := parseCPUSet(s); err == nil {
			_ = cpuSetWithin(set, []cpuRange{{0, 3}})
		}
		_ = quote(s)
	})
}
