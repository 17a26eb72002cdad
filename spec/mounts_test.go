package spec

import (
	"fmt"
	"testing"

	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	crierrors "k8s.io/cri-api/pkg/errors"
)

// mountAt is the only mount at dst; it fails if there is none or more than one.
func mountAt(t *testing.T, s *specs.Spec, dst string) specs.Mount {
	t.Helper()
	var found []specs.Mount
	for _, m := range s.Mounts {
		if m.Destination == dst {
			found = append(found, m)
		}
	}
	require.Len(t, found, 1, "mounts at %s", dst)
	return found[0]
}

func noMountAt(t *testing.T, s *specs.Spec, dst string) {
	t.Helper()
	for _, m := range s.Mounts {
		require.NotEqual(t, dst, m.Destination)
	}
}

func withMounts(ms ...*runtimeapi.Mount) func(*Input) {
	return func(in *Input) { in.Config.Mounts = ms }
}

func bind(ctr, host string) *runtimeapi.Mount {
	return &runtimeapi.Mount{ContainerPath: ctr, HostPath: host}
}

func TestContainerMounts(t *testing.T) {
	ro := func(m *runtimeapi.Mount) *runtimeapi.Mount { m.Readonly = true; return m }
	prop := func(m *runtimeapi.Mount, p runtimeapi.MountPropagation) *runtimeapi.Mount {
		m.Propagation = p
		return m
	}
	rro := func(m *runtimeapi.Mount) *runtimeapi.Mount { m.Readonly, m.RecursiveReadOnly = true, true; return m }
	opts := func(dst string, want ...string) func(*testing.T, *specs.Spec) {
		return func(t *testing.T, s *specs.Spec) { require.Equal(t, want, mountAt(t, s, dst).Options) }
	}
	runCases(t, []testCase{
		{name: "read-write private bind", mutate: withMounts(bind("/data", "/host/data")), check: func(t *testing.T, s *specs.Spec) {
			m := mountAt(t, s, "/data")
			require.Equal(t, specs.Mount{Destination: "/data", Type: "bind", Source: "/host/data",
				Options: []string{"rbind", "rprivate", "rw"}}, m)
			require.Empty(t, s.Linux.RootfsPropagation)
		}},
		{name: "read-only", mutate: withMounts(ro(bind("/data", "/host/data"))), check: opts("/data", "rbind", "rprivate", "ro")},
		{name: "host to container: rslave, rootfs rslave", mutate: withMounts(
			prop(bind("/data", "/host/data"), runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER)),
			check: func(t *testing.T, s *specs.Spec) {
				require.Equal(t, []string{"rbind", "rslave", "rw"}, mountAt(t, s, "/data").Options)
				require.Equal(t, "rslave", s.Linux.RootfsPropagation)
			}},
		{name: "bidirectional: rshared, rootfs rshared", mutate: withMounts(
			prop(bind("/data", "/host/data"), runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL)),
			check: func(t *testing.T, s *specs.Spec) {
				require.Equal(t, []string{"rbind", "rshared", "rw"}, mountAt(t, s, "/data").Options)
				require.Equal(t, "rshared", s.Linux.RootfsPropagation)
			}},
		{name: "rshared rootfs wins over rslave in any order", mutate: withMounts(
			prop(bind("/a", "/h/a"), runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL),
			prop(bind("/b", "/h/b"), runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER)),
			check: func(t *testing.T, s *specs.Spec) { require.Equal(t, "rshared", s.Linux.RootfsPropagation) }},
		{name: "unknown propagation", mutate: withMounts(prop(bind("/a", "/h/a"), runtimeapi.MountPropagation(7))),
			wantErr: errdefs.ErrInvalidArgument},
		{name: "recursive read-only when supported", mutate: func(in *Input) {
			withMounts(rro(bind("/data", "/host/data")))(in)
			in.RecursiveReadOnlyMounts = true
		}, check: opts("/data", "rbind", "rprivate", "rro")},
		{name: "recursive read-only unsupported", mutate: withMounts(rro(bind("/data", "/host/data"))),
			wantErr: crierrors.ErrRROUnsupported},
		{name: "recursive read-only unsupported is NotImplemented", mutate: withMounts(rro(bind("/data", "/host/data"))),
			wantErr: errdefs.ErrNotImplemented},
		{name: "recursive read-only on a rw mount", mutate: func(in *Input) {
			withMounts(&runtimeapi.Mount{ContainerPath: "/d", HostPath: "/h", RecursiveReadOnly: true})(in)
			in.RecursiveReadOnlyMounts = true
		}, wantErr: errdefs.ErrInvalidArgument},
		{name: "recursive read-only needs private propagation", mutate: func(in *Input) {
			withMounts(prop(rro(bind("/d", "/h")), runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER))(in)
			in.RecursiveReadOnlyMounts = true
		}, wantErr: errdefs.ErrInvalidArgument},
		{name: "selinux relabel ignored", mutate: withMounts(&runtimeapi.Mount{ContainerPath: "/d", HostPath: "/h", SelinuxRelabel: true}),
			check: opts("/d", "rbind", "rprivate", "rw")},
		{name: "mount id mappings copied", mutate: withMounts(&runtimeapi.Mount{ContainerPath: "/d", HostPath: "/h",
			UidMappings: []*runtimeapi.IDMapping{{HostId: 5, ContainerId: 0, Length: 10}}}),
			check: func(t *testing.T, s *specs.Spec) {
				require.Equal(t, []specs.LinuxIDMapping{{HostID: 5, ContainerID: 0, Size: 10}}, mountAt(t, s, "/d").UIDMappings)
			}},
		{name: "parents before children", mutate: withMounts(bind("/a/b/c", "/h1"), bind("/a", "/h2"), bind("/a/b", "/h3")),
			check: func(t *testing.T, s *specs.Spec) {
				var order []string
				for _, m := range s.Mounts {
					if m.Type == "bind" && (m.Destination == "/a" || m.Destination == "/a/b" || m.Destination == "/a/b/c") {
						order = append(order, m.Destination)
					}
				}
				require.Equal(t, []string{"/a", "/a/b", "/a/b/c"}, order)
			}},
	})
}

func TestContainerDefaultMounts(t *testing.T) {
	runCases(t, []testCase{
		{name: "default mounts, no /run, read-only cgroup", check: func(t *testing.T, s *specs.Spec) {
			require.Equal(t, "proc", mountAt(t, s, "/proc").Type)
			require.Equal(t, "tmpfs", mountAt(t, s, "/dev").Type)
			require.Equal(t, "devpts", mountAt(t, s, "/dev/pts").Type)
			require.Equal(t, "mqueue", mountAt(t, s, "/dev/mqueue").Type)
			require.Contains(t, mountAt(t, s, "/sys").Options, "ro")
			require.Equal(t, []string{"nosuid", "noexec", "nodev", "relatime", "ro"}, mountAt(t, s, "/sys/fs/cgroup").Options)
			noMountAt(t, s, "/run")
		}},
		{name: "a config mount replaces a default one", mutate: withMounts(bind("/proc", "/h/proc")),
			check: func(t *testing.T, s *specs.Spec) { require.Equal(t, "bind", mountAt(t, s, "/proc").Type) }},
		{name: "a /dev mount replaces every default under /dev", mutate: withMounts(bind("/dev", "/h/dev"), bind("/dev/shm", "/h/shm")),
			check: func(t *testing.T, s *specs.Spec) {
				require.Equal(t, "bind", mountAt(t, s, "/dev").Type)
				require.Equal(t, "/h/shm", mountAt(t, s, "/dev/shm").Source)
				noMountAt(t, s, "/dev/pts")
				noMountAt(t, s, "/dev/mqueue")
			}},
	})
}

func TestContainerMountValidation(t *testing.T) {
	opts := func(dst string, want ...string) func(*testing.T, *specs.Spec) {
		return func(t *testing.T, s *specs.Spec) { require.Equal(t, want, mountAt(t, s, dst).Options) }
	}
	runCases(t, []testCase{
		{name: "relative host path", mutate: withMounts(bind("/d", "host/d")), wantErr: errdefs.ErrInvalidArgument},
		{name: "empty host path", mutate: withMounts(bind("/d", "")), wantErr: errdefs.ErrInvalidArgument},
		{name: "host path with ..", mutate: withMounts(bind("/d", "/var/lib/../../etc")), wantErr: errdefs.ErrInvalidArgument},
		{name: "host path ending in ..", mutate: withMounts(bind("/d", "/var/..")), wantErr: errdefs.ErrInvalidArgument},
		{name: "dots inside a name are fine", mutate: withMounts(bind("/d", "/var/a..b/...")),
			check: func(t *testing.T, s *specs.Spec) { require.Equal(t, "/var/a..b/...", mountAt(t, s, "/d").Source) }},
		{name: "host path cleaned", mutate: withMounts(bind("/d/", "/var//lib/./x/")), check: func(t *testing.T, s *specs.Spec) {
			require.Equal(t, "/var/lib/x", mountAt(t, s, "/d").Source)
		}},
		{name: "relative container path", mutate: withMounts(bind("d", "/h")), wantErr: errdefs.ErrInvalidArgument},
		{name: "unresolved image volume", mutate: withMounts(&runtimeapi.Mount{ContainerPath: "/img",
			Image: &runtimeapi.ImageSpec{Image: "busybox"}}), wantErr: errdefs.ErrInvalidArgument},
		{name: "image volume mounted by the caller", mutate: withMounts(&runtimeapi.Mount{ContainerPath: "/img",
			HostPath: "/var/lib/shimd/imgvol/1", Readonly: true, Image: &runtimeapi.ImageSpec{Image: "busybox"}}),
			check: opts("/img", "rbind", "rprivate", "ro")},
	})
}

func TestContainerPodFiles(t *testing.T) {
	runCases(t, []testCase{
		{name: "pod files read-write", check: func(t *testing.T, s *specs.Spec) {
			for dst, src := range map[string]string{"/etc/hostname": "/pod/hostname", "/etc/hosts": "/pod/hosts", "/etc/resolv.conf": "/pod/resolv.conf"} {
				require.Equal(t, specs.Mount{Destination: dst, Type: "bind", Source: src,
					Options: []string{"rbind", "rprivate", "rw"}}, mountAt(t, s, dst))
			}
		}},
		{name: "readonly rootfs: pod files read-only", mutate: func(in *Input) { sc(in).ReadonlyRootfs = true },
			check: func(t *testing.T, s *specs.Spec) {
				for _, dst := range []string{"/etc/hostname", "/etc/hosts", "/etc/resolv.conf"} {
					require.Equal(t, []string{"rbind", "rprivate", "ro"}, mountAt(t, s, dst).Options)
				}
				require.Contains(t, mountAt(t, s, "/dev/shm").Options, "rw")
			}},
		{name: "config mount at /etc/hosts wins", mutate: withMounts(bind("/etc/hosts", "/kubelet/etc-hosts")),
			check: func(t *testing.T, s *specs.Spec) {
				require.Equal(t, "/kubelet/etc-hosts", mountAt(t, s, "/etc/hosts").Source)
				require.Equal(t, "/pod/resolv.conf", mountAt(t, s, "/etc/resolv.conf").Source)
			}},
		{name: "config mount at /etc/resolv.conf/ (unclean) wins", mutate: withMounts(bind("/etc/resolv.conf/", "/mine")),
			check: func(t *testing.T, s *specs.Spec) { require.Equal(t, "/mine", mountAt(t, s, "/etc/resolv.conf").Source) }},
		{name: "no pod files given", mutate: func(in *Input) {
			in.HostnamePath, in.HostsPath, in.ResolvConfPath = "", "", ""
		}, check: func(t *testing.T, s *specs.Spec) {
			noMountAt(t, s, "/etc/hostname")
			noMountAt(t, s, "/etc/hosts")
			noMountAt(t, s, "/etc/resolv.conf")
		}},
		{name: "pod shm replaces the default tmpfs", check: func(t *testing.T, s *specs.Spec) {
			require.Equal(t, specs.Mount{Destination: "/dev/shm", Type: "bind", Source: "/pod/shm",
				Options: []string{"rbind", "rprivate", "nosuid", "nodev", "noexec", "rw"}}, mountAt(t, s, "/dev/shm"))
		}},
		{name: "host ipc: host /dev/shm", mutate: hostIPCMode, check: func(t *testing.T, s *specs.Spec) {
			require.Equal(t, "/dev/shm", mountAt(t, s, "/dev/shm").Source)
		}},
		{name: "no shm path: default tmpfs", mutate: func(in *Input) { in.ShmPath = "" }, check: func(t *testing.T, s *specs.Spec) {
			require.Equal(t, "tmpfs", mountAt(t, s, "/dev/shm").Type)
		}},
		{name: "config /dev/shm wins", mutate: withMounts(bind("/dev/shm", "/mine")),
			check: func(t *testing.T, s *specs.Spec) { require.Equal(t, "/mine", mountAt(t, s, "/dev/shm").Source) }},
	})
}

func TestMountOptions(t *testing.T) {
	withOpts := func(m *runtimeapi.Mount, o ...string) *runtimeapi.Mount { m.MountOptions = o; return m }
	runcKnows := []string{"noexec", "rnoexec", "nodev", "rnodev", "nosuid", "rnosuid", "ro", "rro", "noatime", "rnoatime"}
	known := func(in *Input) { in.MountOptions = runcKnows }
	opts := func(dst string, want ...string) func(*testing.T, *specs.Spec) {
		return func(t *testing.T, s *specs.Spec) { require.Equal(t, want, mountAt(t, s, dst).Options) }
	}
	runCases(t, []testCase{
		{name: "flags with their recursive forms", mutate: func(in *Input) {
			known(in)
			withMounts(withOpts(bind("/data", "/h"), "noexec", "nodev", "nosuid", "noexec"))(in)
		}, check: opts("/data", "rbind", "rprivate", "rw", "noexec", "rnoexec", "nodev", "rnodev", "nosuid", "rnosuid")},
		{name: "runtime that did not say: plain flags", mutate: withMounts(withOpts(bind("/data", "/h"), "noexec")),
			check: opts("/data", "rbind", "rprivate", "rw", "noexec")},
		{name: "on a read-only mount", mutate: func(in *Input) {
			known(in)
			withMounts(withOpts(&runtimeapi.Mount{ContainerPath: "/data", HostPath: "/h", Readonly: true}, "nosuid"))(in)
		}, check: opts("/data", "rbind", "rprivate", "ro", "nosuid", "rnosuid")},
		{name: "ro as an option makes the mount read-only", mutate: func(in *Input) {
			known(in)
			withMounts(withOpts(bind("/data", "/h"), "ro", "noatime"))(in)
		}, check: opts("/data", "rbind", "rprivate", "ro", "noatime", "rnoatime")},
		{name: "on an id-mapped mount", mutate: func(in *Input) {
			known(in)
			m := withOpts(bind("/data", "/h"), "nodev")
			m.UidMappings = []*runtimeapi.IDMapping{{HostId: 100000, ContainerId: 0, Length: 65536}}
			m.GidMappings = m.UidMappings
			withMounts(m)(in)
		}, check: func(t *testing.T, s *specs.Spec) {
			m := mountAt(t, s, "/data")
			require.Equal(t, []string{"rbind", "rprivate", "rw", "nodev", "rnodev"}, m.Options)
			require.Len(t, m.UIDMappings, 1)
		}},
		{name: "flag the runtime does not know", mutate: func(in *Input) {
			known(in)
			withMounts(withOpts(bind("/data", "/h"), "nosymfollow"))(in)
		}, wantErr: errdefs.ErrNotImplemented},
	})
	for _, bad := range []string{"rw", "exec", "suid", "dev", "shared", "rslave", "bind", "rbind", "rro", "rnoexec",
		"idmap", "size=1m", "mode=777", "", "NOEXEC", "defaults", "remount", "frobnicate"} {
		t.Run("refused "+bad, func(t *testing.T) {
			in := baseInput()
			withMounts(withOpts(bind("/data", "/h"), "noexec", bad))(&in)
			_, err := Container(in)
			require.ErrorIs(t, err, errdefs.ErrInvalidArgument)
			require.ErrorContains(t, err, "config.mounts[0].mount_options[1]")
			require.ErrorContains(t, err, fmt.Sprintf("%q", bad))
		})
	}
}
