package sandbox

import (
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/pod"
)

func nsPath(s *specs.Spec, typ specs.LinuxNamespaceType) (string, bool) {
	for _, ns := range s.Linux.Namespaces {
		if ns.Type == typ {
			return ns.Path, true
		}
	}
	return "", false
}

func TestPauseSpec(t *testing.T) {
	base := func() *runtimeapi.PodSandboxConfig {
		return &runtimeapi.PodSandboxConfig{
			Metadata: &runtimeapi.PodSandboxMetadata{Name: "p", Namespace: "ns", Uid: "u"},
			Hostname: "myhost",
			Linux:    &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{}},
		}
	}
	tests := []struct {
		name   string
		mutate func(c *runtimeapi.PodSandboxConfig, in *PauseSpecInput)
		check  func(t *testing.T, s *specs.Spec)
	}{
		{name: "SELinux labels", mutate: func(_ *runtimeapi.PodSandboxConfig, in *PauseSpecInput) {
			in.ProcessLabel, in.MountLabel = "u:r:container_t:s0:c1,c2", "u:object_r:container_file_t:s0:c1,c2"
		}, check: func(t *testing.T, s *specs.Spec) {
			require.Equal(t, "u:r:container_t:s0:c1,c2", s.Process.SelinuxLabel)
			require.Equal(t, "u:object_r:container_file_t:s0:c1,c2", s.Linux.MountLabel)
		}},
		{name: "SELinux: privileged pause runs without its label", mutate: func(c *runtimeapi.PodSandboxConfig, in *PauseSpecInput) {
			c.Linux.SecurityContext.Privileged = true
			in.ProcessLabel, in.MountLabel = "u:r:container_t:s0:c1,c2", "u:object_r:container_file_t:s0:c1,c2"
		}, check: func(t *testing.T, s *specs.Spec) {
			require.Empty(t, s.Process.SelinuxLabel)
			require.Equal(t, "u:object_r:container_file_t:s0:c1,c2", s.Linux.MountLabel)
		}},
		{name: "pod network namespace and hostname", check: func(t *testing.T, s *specs.Spec) {
			p, ok := nsPath(s, specs.NetworkNamespace)
			require.True(t, ok)
			require.Equal(t, "/run/shimd/netns/abc", p)
			_, ok = nsPath(s, specs.UTSNamespace)
			require.True(t, ok)
			require.Equal(t, "myhost", s.Hostname)
			require.Equal(t, []string{"/pause"}, s.Process.Args)
			require.True(t, s.Root.Readonly)
			require.Equal(t, "rootfs", s.Root.Path, "the bundle's rootfs, where the shim mounts the snapshot")
			require.True(t, s.Process.NoNewPrivileges)
			require.Equal(t, "/shimd/abc", s.Linux.CgroupsPath)
			require.Equal(t, uint64(DefaultSandboxCPUShares), *s.Linux.Resources.CPU.Shares)
		}},
		{name: "shared read-only root", mutate: func(_ *runtimeapi.PodSandboxConfig, in *PauseSpecInput) {
			in.RootPath = "/var/lib/shimd/pause-rootfs/0123"
		}, check: func(t *testing.T, s *specs.Spec) {
			require.Equal(t, "/var/lib/shimd/pause-rootfs/0123", s.Root.Path)
			require.True(t, s.Root.Readonly)
			// runc writes only into these mounts, never into the shared root.
			for _, dst := range []string{"/proc", "/dev", "/sys"} {
				require.True(t, slices.ContainsFunc(s.Mounts, func(m specs.Mount) bool { return m.Destination == dst }), dst)
			}
		}},
		{name: "host network, pid and ipc", mutate: func(c *runtimeapi.PodSandboxConfig, in *PauseSpecInput) {
			c.Linux.SecurityContext.NamespaceOptions = &runtimeapi.NamespaceOption{
				Network: runtimeapi.NamespaceMode_NODE, Pid: runtimeapi.NamespaceMode_NODE, Ipc: runtimeapi.NamespaceMode_NODE}
			in.NetNSPath = ""
		}, check: func(t *testing.T, s *specs.Spec) {
			for _, typ := range []specs.LinuxNamespaceType{specs.NetworkNamespace, specs.UTSNamespace, specs.PIDNamespace, specs.IPCNamespace} {
				_, ok := nsPath(s, typ)
				require.False(t, ok, "namespace %s must be the host's", typ)
			}
			require.Empty(t, s.Hostname)
		}},
		{name: "host network with a pod user namespace: no /sys", mutate: func(c *runtimeapi.PodSandboxConfig, in *PauseSpecInput) {
			ids := []*runtimeapi.IDMapping{{HostId: 100000, Length: 65536}}
			c.Linux.SecurityContext.NamespaceOptions = &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE,
				UsernsOptions: &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: ids, Gids: ids}}
			in.NetNSPath = ""
		}, check: func(t *testing.T, s *specs.Spec) {
			_, ok := nsPath(s, specs.NetworkNamespace)
			require.False(t, ok)
			p, ok := nsPath(s, specs.UserNamespace)
			require.True(t, ok)
			require.Empty(t, p, "pause makes the user namespace")
			require.Equal(t, []specs.LinuxIDMapping{{HostID: 100000, Size: 65536}}, s.Linux.UIDMappings)
			for _, m := range s.Mounts {
				require.NotEqual(t, "/sys", m.Destination)
			}
		}},
		{name: "oom_score_adj clamped to shimd's own", mutate: func(_ *runtimeapi.PodSandboxConfig, in *PauseSpecInput) {
			in.MinOOMScoreAdj = -500
		}, check: func(t *testing.T, s *specs.Spec) {
			require.Equal(t, -500, *s.Process.OOMScoreAdj)
		}},
		{name: "oom_score_adj default when allowed", check: func(t *testing.T, s *specs.Spec) {
			require.Equal(t, DefaultSandboxOOMScoreAdj, *s.Process.OOMScoreAdj)
		}},
		{name: "cgroup parent cgroupfs", mutate: func(c *runtimeapi.PodSandboxConfig, _ *PauseSpecInput) {
			c.Linux.CgroupParent = "/kubepods/besteffort/podu"
		}, check: func(t *testing.T, s *specs.Spec) {
			require.Equal(t, "/kubepods/besteffort/podu/abc", s.Linux.CgroupsPath)
		}},
		{name: "cgroup parent systemd", mutate: func(c *runtimeapi.PodSandboxConfig, in *PauseSpecInput) {
			c.Linux.CgroupParent = "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podu.slice"
			in.CgroupDriver = "systemd"
		}, check: func(t *testing.T, s *specs.Spec) {
			require.Equal(t, "kubepods-besteffort-podu.slice:shimd:abc", s.Linux.CgroupsPath)
		}},
		{name: "sysctls", mutate: func(c *runtimeapi.PodSandboxConfig, in *PauseSpecInput) {
			in.Sysctls = map[string]string{"net.ipv4.ip_unprivileged_port_start": "0", "kernel.shm_rmid_forced": "1"}
		}, check: func(t *testing.T, s *specs.Spec) {
			require.Equal(t, map[string]string{"net.ipv4.ip_unprivileged_port_start": "0", "kernel.shm_rmid_forced": "1"}, s.Linux.Sysctl)
		}},
		{name: "run as user, group and supplemental groups", mutate: func(c *runtimeapi.PodSandboxConfig, _ *PauseSpecInput) {
			c.Linux.SecurityContext.RunAsUser = &runtimeapi.Int64Value{Value: 1000}
			c.Linux.SecurityContext.RunAsGroup = &runtimeapi.Int64Value{Value: 2000}
			c.Linux.SecurityContext.SupplementalGroups = []int64{3000, 4000}
		}, check: func(t *testing.T, s *specs.Spec) {
			require.Equal(t, uint32(1000), s.Process.User.UID)
			require.Equal(t, uint32(2000), s.Process.User.GID)
			require.Subset(t, s.Process.User.AdditionalGids, []uint32{3000, 4000})
		}},
		{name: "privileged has no masked paths", mutate: func(c *runtimeapi.PodSandboxConfig, _ *PauseSpecInput) {
			c.Linux.SecurityContext.Privileged = true
		}, check: func(t *testing.T, s *specs.Spec) {
			require.Empty(t, s.Linux.MaskedPaths)
			require.Empty(t, s.Linux.ReadonlyPaths)
		}},
		{name: "annotations name the sandbox as containerd's CRI plugin does", mutate: func(c *runtimeapi.PodSandboxConfig, _ *PauseSpecInput) {
			c.LogDirectory = "/var/log/pods/ns_p_u"
		}, check: func(t *testing.T, s *specs.Spec) {
			require.Equal(t, map[string]string{
				"io.kubernetes.cri.container-type":        "sandbox",
				"io.kubernetes.cri.sandbox-id":            "abc",
				"io.kubernetes.cri.sandbox-name":          "p",
				"io.kubernetes.cri.sandbox-namespace":     "ns",
				"io.kubernetes.cri.sandbox-uid":           "u",
				"io.kubernetes.cri.sandbox-log-directory": "/var/log/pods/ns_p_u",
				"io.kubernetes.cri.podsandbox.image-name": "localhost/shimd/pause:1.0",
			}, s.Annotations)
		}},
		{name: "sandbox resources become annotations", mutate: func(c *runtimeapi.PodSandboxConfig, _ *PauseSpecInput) {
			c.Linux.Resources = &runtimeapi.LinuxContainerResources{CpuPeriod: 100000, CpuQuota: 50000, CpuShares: 512, MemoryLimitInBytes: 64 << 20}
		}, check: func(t *testing.T, s *specs.Spec) {
			require.Equal(t, "100000", s.Annotations["io.kubernetes.cri.sandbox-cpu-period"])
			require.Equal(t, "50000", s.Annotations["io.kubernetes.cri.sandbox-cpu-quota"])
			require.Equal(t, "512", s.Annotations["io.kubernetes.cri.sandbox-cpu-shares"])
			require.Equal(t, "67108864", s.Annotations["io.kubernetes.cri.sandbox-memory"])
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := base()
			in := PauseSpecInput{ID: "abc", Namespace: "shimd", Config: cfg, ImageArgs: []string{"/pause"},
				NetNSPath: "/run/shimd/netns/abc", CgroupDriver: "cgroupfs", MinOOMScoreAdj: -1000, ImageName: "localhost/shimd/pause:1.0"}
			if tt.mutate != nil {
				tt.mutate(cfg, &in)
			}
			s, err := PauseSpec(in)
			require.NoError(t, err)
			tt.check(t, s)
		})
	}
}

func TestPauseSpecNeedsArgs(t *testing.T) {
	_, err := PauseSpec(PauseSpecInput{ID: "a", Namespace: "n", Config: &runtimeapi.PodSandboxConfig{}})
	require.Error(t, err)
}

func TestResolvConf(t *testing.T) {
	require.Equal(t, "", ResolvConf(nil), "no DNS config: nothing, never the node's resolver")
	got := ResolvConf(&runtimeapi.DNSConfig{Servers: []string{"198.18.0.10", "198.18.0.11"}, Searches: []string{"ns.svc.cluster.local", "svc.cluster.local"}, Options: []string{"ndots:5"}})
	require.Equal(t, "search ns.svc.cluster.local svc.cluster.local\nnameserver 198.18.0.10\nnameserver 198.18.0.11\noptions ndots:5\n", got)
}

func TestBandwidth(t *testing.T) {
	require.Nil(t, bandwidth(nil))
	bw := bandwidth(map[string]string{annotationIngressBandwidth: "10M", annotationEgressBandwidth: "1Gi"})
	require.Equal(t, uint64(10e6), bw.IngressRate)
	require.Equal(t, uint64(1<<30), bw.EgressRate)
	require.Nil(t, bandwidth(map[string]string{annotationIngressBandwidth: "fast"}))
}

func TestMakeName(t *testing.T) {
	require.Equal(t, "web_default_uid-1_2", pod.MakeName(&runtimeapi.PodSandboxMetadata{Name: "web", Namespace: "default", Uid: "uid-1", Attempt: 2}))
}
