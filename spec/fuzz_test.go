package spec

import (
	"testing"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// FuzzContainer feeds the pure spec builder container and pod configs decoded from
// arbitrary protobuf bytes, plus a Localhost seccomp profile; it may refuse them but
// never panic, and what it builds has a process and Linux section.
func FuzzContainer(f *testing.F) {
	base := baseInput()
	add := func(c *runtimeapi.ContainerConfig, sb *runtimeapi.PodSandboxConfig, profile string) {
		cb, _ := proto.Marshal(c)
		sbb, _ := proto.Marshal(sb)
		f.Add(cb, sbb, []byte(profile))
	}
	add(base.Config, base.SandboxConfig, "")
	priv := proto.Clone(base.Config).(*runtimeapi.ContainerConfig)
	priv.Linux.SecurityContext.Privileged = true
	priv.Linux.SecurityContext.Capabilities = &runtimeapi.Capability{AddCapabilities: []string{"ALL"}, DropCapabilities: []string{"CHOWN"}}
	add(priv, base.SandboxConfig, "")
	full := proto.Clone(base.Config).(*runtimeapi.ContainerConfig)
	full.Command, full.Args, full.WorkingDir = []string{"sh", "-c"}, []string{"echo $A"}, "/work"
	full.Envs = []*runtimeapi.KeyValue{{Key: "A", Value: []byte("b")}}
	full.Mounts = []*runtimeapi.Mount{{HostPath: "/srv", ContainerPath: "/data", Readonly: true, RecursiveReadOnly: true},
		{HostPath: "/a", ContainerPath: "/etc/hosts", Propagation: runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL}}
	full.Linux.Resources = &runtimeapi.LinuxContainerResources{CpuPeriod: 100000, CpuQuota: 50000, CpuShares: 512,
		MemoryLimitInBytes: 1 << 28, OomScoreAdj: -999, Unified: map[string]string{"memory.high": "1"},
		HugepageLimits: []*runtimeapi.HugepageLimit{{PageSize: "2MB", Limit: 1 << 21}}}
	full.Linux.SecurityContext.Seccomp = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "/p.json"}
	full.Linux.SecurityContext.RunAsUser = &runtimeapi.Int64Value{Value: 1000}
	full.Linux.SecurityContext.MaskedPaths = []string{"/proc/kcore"}
	full.Devices = []*runtimeapi.Device{{HostPath: "/dev/null", ContainerPath: "/dev/x", Permissions: "rw"}}
	add(full, base.SandboxConfig, `{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[{"names":["read"],"action":"SCMP_ACT_ALLOW"}]}`)
	f.Add([]byte{0x0a, 0x00}, []byte{}, []byte("{"))

	f.Fuzz(func(t *testing.T, cfgBytes, sbBytes, profile []byte) {
		cfg, sb := &runtimeapi.ContainerConfig{}, &runtimeapi.PodSandboxConfig{}
		if proto.Unmarshal(cfgBytes, cfg) != nil || proto.Unmarshal(sbBytes, sb) != nil {
			return
		}
		in := baseInput()
		in.Config, in.SandboxConfig, in.SeccompLocalhost = cfg, sb, profile
		s, err := Container(in)
		if err == nil && (s.Process == nil || s.Linux == nil) {
			t.Fatalf("spec without process or linux section: %+v", s)
		}
		_ = Resources(cfg.GetLinux().GetResources(), 0)
	})
}
