package spec

import (
	"testing"

	"github.com/containerd/errdefs"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// testCase is one row of the Container tables: mutate a valid base input, then
// either check the spec or expect an error of a class.
type testCase struct {
	name    string
	mutate  func(in *Input)
	check   func(t *testing.T, s *specs.Spec)
	wantErr error // an errdefs class, or any sentinel the error must wrap
}

func runCases(t *testing.T, cases []testCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := baseInput()
			if tc.mutate != nil {
				tc.mutate(&in)
			}
			s, err := Container(in)
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			if tc.check != nil {
				tc.check(t, s)
			}
		})
	}
}

// baseInput is a valid input: a pod-network pod with its own pid namespace per
// container, an image with entrypoint, cmd and env, and all pod files.
func baseInput() Input {
	return Input{
		ID: "c1", Namespace: "shimd", SandboxID: "sb1",
		Config: &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: "app"},
			Linux: &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER},
			}},
		},
		SandboxConfig: &runtimeapi.PodSandboxConfig{
			Metadata: &runtimeapi.PodSandboxMetadata{Name: "pod", Namespace: "default", Uid: "pod-uid"},
			Hostname: "podhost",
			Linux: &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{},
			}},
		},
		Image: ocispec.ImageConfig{
			Entrypoint: []string{"/entry"}, Cmd: []string{"cmd1", "cmd2"},
			Env: []string{"PATH=/img/bin", "A=image-a", "B=image-b"},
		},
		ImageName:      "registry.test/app:1",
		User:           User{UID: 1000, GID: 1000, AdditionalGIDs: []uint32{1000, 2000}},
		SandboxPID:     42,
		NetNSPath:      "/run/shimd/netns/sb1",
		HostnamePath:   "/pod/hostname",
		HostsPath:      "/pod/hosts",
		ResolvConfPath: "/pod/resolv.conf",
		ShmPath:        "/pod/shm",
		AllCapabilities: []string{"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_KILL", "CAP_NET_ADMIN",
			"CAP_SYS_ADMIN", "CAP_SETUID", "CAP_SETGID"},
	}
}

func sc(in *Input) *runtimeapi.LinuxContainerSecurityContext {
	return in.Config.Linux.SecurityContext
}

func TestContainerValidation(t *testing.T) {
	runCases(t, []testCase{
		{name: "empty id", mutate: func(in *Input) { in.ID = "" }, wantErr: errdefs.ErrInvalidArgument},
		{name: "empty namespace", mutate: func(in *Input) { in.Namespace = "" }, wantErr: errdefs.ErrInvalidArgument},
		{name: "no config", mutate: func(in *Input) { in.Config = nil }, wantErr: errdefs.ErrInvalidArgument},
		{name: "no sandbox config", mutate: func(in *Input) { in.SandboxConfig = nil }, wantErr: errdefs.ErrInvalidArgument},
		{name: "no pause pid", mutate: func(in *Input) { in.SandboxPID = 0 }, wantErr: errdefs.ErrInvalidArgument},
		{name: "config without linux section", mutate: func(in *Input) { in.Config.Linux = nil }, check: func(t *testing.T, s *specs.Spec) {
			require.Equal(t, "/proc/42/ns/pid", nsPathOf(t, s, specs.PIDNamespace), "nil options mean pid mode POD")
		}},
	})
}

func TestContainerArgs(t *testing.T) {
	runCases(t, []testCase{
		{name: "neither command nor args: entrypoint + cmd", check: args("/entry", "cmd1", "cmd2")},
		{name: "args only: entrypoint + args", mutate: func(in *Input) { in.Config.Args = []string{"a1"} },
			check: args("/entry", "a1")},
		{name: "command only: command, image cmd dropped", mutate: func(in *Input) { in.Config.Command = []string{"/c"} },
			check: args("/c")},
		{name: "command and args", mutate: func(in *Input) {
			in.Config.Command, in.Config.Args = []string{"/c", "-x"}, []string{"a1", "a2"}
		}, check: args("/c", "-x", "a1", "a2")},
		{name: "no entrypoint: cmd alone", mutate: func(in *Input) { in.Image.Entrypoint = nil },
			check: args("cmd1", "cmd2")},
		{name: "entrypoint [\"\"] is cleared", mutate: func(in *Input) { in.Image.Entrypoint = []string{""} },
			check: args("cmd1", "cmd2")},
		{name: "no cmd: entrypoint alone", mutate: func(in *Input) { in.Image.Cmd = nil }, check: args("/entry")},
		{name: "no entrypoint, args only", mutate: func(in *Input) {
			in.Image.Entrypoint, in.Config.Args = nil, []string{"/bin/a"}
		}, check: args("/bin/a")},
		{name: "nothing at all", mutate: func(in *Input) {
			in.Image.Entrypoint, in.Image.Cmd = nil, nil
		}, wantErr: errdefs.ErrInvalidArgument},
	})
}

func args(want ...string) func(*testing.T, *specs.Spec) {
	return func(t *testing.T, s *specs.Spec) { require.Equal(t, want, s.Process.Args) }
}

func TestContainerEnv(t *testing.T) {
	kv := func(k, v string) *runtimeapi.KeyValue { return &runtimeapi.KeyValue{Key: k, Value: []byte(v)} }
	env := func(want ...string) func(*testing.T, *specs.Spec) {
		return func(t *testing.T, s *specs.Spec) { require.Equal(t, want, s.Process.Env) }
	}
	runCases(t, []testCase{
		{name: "image env, then defaults it lacks", check: env("PATH=/img/bin", "A=image-a", "B=image-b", "HOSTNAME=podhost")},
		{name: "config overrides in place, new keys after image's", mutate: func(in *Input) {
			in.Config.Envs = []*runtimeapi.KeyValue{kv("C", "c"), kv("A", "cfg-a"), kv("D", "d")}
		}, check: env("PATH=/img/bin", "A=cfg-a", "B=image-b", "C=c", "D=d", "HOSTNAME=podhost")},
		{name: "later config duplicate wins", mutate: func(in *Input) {
			in.Config.Envs = []*runtimeapi.KeyValue{kv("C", "1"), kv("C", "2")}
		}, check: env("PATH=/img/bin", "A=image-a", "B=image-b", "C=2", "HOSTNAME=podhost")},
		{name: "duplicate image keys collapse, last wins", mutate: func(in *Input) {
			in.Image.Env = []string{"A=1", "B=2", "A=3"}
		}, check: env("A=3", "B=2", "PATH="+defaultPath[len("PATH="):], "HOSTNAME=podhost")},
		{name: "default PATH when nobody sets it", mutate: func(in *Input) { in.Image.Env = nil },
			check: env(defaultPath, "HOSTNAME=podhost")},
		{name: "config HOSTNAME overrides the pod's", mutate: func(in *Input) {
			in.Config.Envs = []*runtimeapi.KeyValue{kv("HOSTNAME", "mine")}
		}, check: env("PATH=/img/bin", "A=image-a", "B=image-b", "HOSTNAME=mine")},
		{name: "no pod hostname, no HOSTNAME", mutate: func(in *Input) { in.SandboxConfig.Hostname = "" },
			check: env("PATH=/img/bin", "A=image-a", "B=image-b")},
		{name: "empty value kept", mutate: func(in *Input) { in.Config.Envs = []*runtimeapi.KeyValue{kv("B", "")} },
			check: env("PATH=/img/bin", "A=image-a", "B=", "HOSTNAME=podhost")},
		{name: "value with =", mutate: func(in *Input) { in.Config.Envs = []*runtimeapi.KeyValue{kv("E", "x=y")} },
			check: env("PATH=/img/bin", "A=image-a", "B=image-b", "E=x=y", "HOSTNAME=podhost")},
		{name: "empty key", mutate: func(in *Input) { in.Config.Envs = []*runtimeapi.KeyValue{kv("", "x")} },
			wantErr: errdefs.ErrInvalidArgument},
		{name: "key with =", mutate: func(in *Input) { in.Config.Envs = []*runtimeapi.KeyValue{kv("A=B", "x")} },
			wantErr: errdefs.ErrInvalidArgument},
		// What runc refuses at start of an image's env is the image's fault.
		{name: "image entry without =", mutate: func(in *Input) { in.Image.Env = []string{"A=1", "NOVALUE"} },
			wantErr: errdefs.ErrFailedPrecondition},
		{name: "image entry without a name", mutate: func(in *Input) { in.Image.Env = []string{"=1"} },
			wantErr: errdefs.ErrFailedPrecondition},
		{name: "image entry with NUL", mutate: func(in *Input) { in.Image.Env = []string{"A=x\x00y"} },
			wantErr: errdefs.ErrFailedPrecondition},
		{name: "image entry the config replaces is not judged", mutate: func(in *Input) {
			in.Image.Env = []string{"A"}
			in.Config.Envs = []*runtimeapi.KeyValue{kv("A", "x")}
		}, check: env("A=x", defaultPath, "HOSTNAME=podhost")},
		{name: "image entry with an empty value", mutate: func(in *Input) { in.Image.Env = []string{"A="} },
			check: env("A=", defaultPath, "HOSTNAME=podhost")},
	})
}

// The image's own process fields: what runc would refuse only at start is refused
// here, as the image's fault; a field the config replaces is not judged.
func TestContainerImageStrings(t *testing.T) {
	runCases(t, []testCase{
		{name: "NUL in the entrypoint", mutate: func(in *Input) { in.Image.Entrypoint = []string{"/e\x00"} },
			wantErr: errdefs.ErrFailedPrecondition},
		{name: "NUL in the cmd", mutate: func(in *Input) { in.Image.Cmd = []string{"a", "b\x00"} },
			wantErr: errdefs.ErrFailedPrecondition},
		{name: "NUL in the working dir", mutate: func(in *Input) { in.Image.WorkingDir = "/w\x00" },
			wantErr: errdefs.ErrFailedPrecondition},
		{name: "config working dir over a bad image one", mutate: func(in *Input) {
			in.Image.WorkingDir, in.Config.WorkingDir = "w\x00", "/ok"
		}, check: func(t *testing.T, s *specs.Spec) { require.Equal(t, "/ok", s.Process.Cwd) }},
		{name: "config command over a bad entrypoint and cmd", mutate: func(in *Input) {
			in.Image.Entrypoint, in.Image.Cmd, in.Config.Command = []string{"/e\x00"}, []string{"\x00"}, []string{"/c"}
		}, check: args("/c")},
		{name: "config args over a bad cmd", mutate: func(in *Input) {
			in.Image.Cmd, in.Config.Args = []string{"\x00"}, []string{"a"}
		}, check: args("/entry", "a")},
	})
}

func TestContainerProcess(t *testing.T) {
	runCases(t, []testCase{
		{name: "working dir defaults to /", check: func(t *testing.T, s *specs.Spec) { require.Equal(t, "/", s.Process.Cwd) }},
		{name: "working dir from image", mutate: func(in *Input) { in.Image.WorkingDir = "/img" },
			check: func(t *testing.T, s *specs.Spec) { require.Equal(t, "/img", s.Process.Cwd) }},
		{name: "working dir from config wins", mutate: func(in *Input) {
			in.Image.WorkingDir, in.Config.WorkingDir = "/img", "/cfg/"
		}, check: func(t *testing.T, s *specs.Spec) { require.Equal(t, "/cfg", s.Process.Cwd) }},
		{name: "relative config working dir", mutate: func(in *Input) { in.Config.WorkingDir = "rel" },
			wantErr: errdefs.ErrInvalidArgument},
		{name: "relative image working dir", mutate: func(in *Input) { in.Image.WorkingDir = "rel" },
			wantErr: errdefs.ErrFailedPrecondition},
		{name: "config working dir in /proc (CVE-2024-21626)", mutate: func(in *Input) { in.Config.WorkingDir = "/proc/self/fd/7" },
			wantErr: errdefs.ErrInvalidArgument},
		{name: "image working dir in /proc", mutate: func(in *Input) { in.Image.WorkingDir = "/x/../proc/1/cwd" },
			wantErr: errdefs.ErrFailedPrecondition},
		{name: "working dir /process is not /proc", mutate: func(in *Input) { in.Config.WorkingDir = "/process" },
			check: func(t *testing.T, s *specs.Spec) { require.Equal(t, "/process", s.Process.Cwd) }},
		{name: "tty", mutate: func(in *Input) { in.Config.Tty, in.Config.Stdin = true, true },
			check: func(t *testing.T, s *specs.Spec) { require.True(t, s.Process.Terminal) }},
		{name: "no tty by default", check: func(t *testing.T, s *specs.Spec) { require.False(t, s.Process.Terminal) }},
		{name: "pod hostname", check: func(t *testing.T, s *specs.Spec) { require.Equal(t, "podhost", s.Hostname) }},
		{name: "host network: no hostname in spec", mutate: hostNet, check: func(t *testing.T, s *specs.Spec) {
			require.Empty(t, s.Hostname)
			require.Contains(t, s.Process.Env, "HOSTNAME=podhost")
		}},
		{name: "user from input", check: func(t *testing.T, s *specs.Spec) {
			require.Equal(t, specs.User{UID: 1000, GID: 1000, AdditionalGids: []uint32{1000, 2000}}, s.Process.User)
		}},
		{name: "new privileges allowed by default", check: func(t *testing.T, s *specs.Spec) {
			require.False(t, s.Process.NoNewPrivileges)
		}},
		{name: "no_new_privs", mutate: func(in *Input) { sc(in).NoNewPrivs = true },
			check: func(t *testing.T, s *specs.Spec) { require.True(t, s.Process.NoNewPrivileges) }},
		{name: "readonly rootfs", mutate: func(in *Input) { sc(in).ReadonlyRootfs = true },
			check: func(t *testing.T, s *specs.Spec) { require.True(t, s.Root.Readonly) }},
		{name: "writable rootfs by default", check: func(t *testing.T, s *specs.Spec) {
			require.False(t, s.Root.Readonly)
			require.Equal(t, "rootfs", s.Root.Path)
		}},
		{name: "no rlimits: inherited from the shim", check: func(t *testing.T, s *specs.Spec) {
			require.Nil(t, s.Process.Rlimits)
		}},
	})
}

func TestContainerAnnotations(t *testing.T) {
	runCases(t, []testCase{
		{name: "CRI annotations", check: func(t *testing.T, s *specs.Spec) {
			require.Equal(t, map[string]string{
				AnnotationContainerType: "container", AnnotationSandboxID: "sb1",
				AnnotationSandboxName: "pod", AnnotationSandboxNamespace: "default", AnnotationSandboxUID: "pod-uid",
				AnnotationContainerName: "app", AnnotationImageName: "registry.test/app:1",
			}, s.Annotations)
		}},
		{name: "config annotations kept, CRI ones win", mutate: func(in *Input) {
			in.Config.Annotations = map[string]string{"x": "y", AnnotationContainerType: "sandbox"}
		}, check: func(t *testing.T, s *specs.Spec) {
			require.Equal(t, "y", s.Annotations["x"])
			require.Equal(t, "container", s.Annotations[AnnotationContainerType])
		}},
		{name: "annotations runc obeys dropped", mutate: func(in *Input) {
			in.Config.Annotations = map[string]string{"org.systemd.property.ExecStopPost": "x", "org.criu.config": "/c",
				"bundle": "/b", "org.systemd.propertyX": "kept", "io.x/bundle": "kept"}
		}, check: func(t *testing.T, s *specs.Spec) {
			for _, k := range []string{"org.systemd.property.ExecStopPost", "org.criu.config", "bundle"} {
				require.NotContains(t, s.Annotations, k)
			}
			require.Equal(t, "kept", s.Annotations["org.systemd.propertyX"])
			require.Equal(t, "kept", s.Annotations["io.x/bundle"])
		}},
	})
}

func TestContainerLeavesInputAlone(t *testing.T) {
	in := baseInput()
	in.Image.Entrypoint = make([]string, 1, 8)
	in.Image.Entrypoint[0] = "/e"
	in.Config.Annotations = map[string]string{"x": "y"}
	sc(&in).MaskedPaths = []string{"/m"}
	s, err := Container(in)
	require.NoError(t, err)
	require.Equal(t, []string{"/e", "cmd1", "cmd2"}, s.Process.Args)
	require.Equal(t, []string{"/e", ""}, in.Image.Entrypoint[:2], "args must not be appended into the image's slice")
	require.Equal(t, map[string]string{"x": "y"}, in.Config.Annotations)
	s.Linux.MaskedPaths[0] = "/changed"
	require.Equal(t, []string{"/m"}, sc(&in).MaskedPaths)
	s.Process.User.AdditionalGids[0] = 7
	require.Equal(t, uint32(1000), in.User.AdditionalGIDs[0])
}
