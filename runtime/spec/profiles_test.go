package spec

import (
	"testing"

	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func seccompProfile(typ runtimeapi.SecurityProfile_ProfileType, ref string) func(*Input) {
	return func(in *Input) { sc(in).Seccomp = &runtimeapi.SecurityProfile{ProfileType: typ, LocalhostRef: ref} }
}

func apparmorProfile(typ runtimeapi.SecurityProfile_ProfileType, ref string) func(*Input) {
	return func(in *Input) { sc(in).Apparmor = &runtimeapi.SecurityProfile{ProfileType: typ, LocalhostRef: ref} }
}

const localProfile = `{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[{"names":["read","write"],"action":"SCMP_ACT_ALLOW"}]}`

func noSeccomp(t *testing.T, s *specs.Spec) { require.Nil(t, s.Linux.Seccomp) }

func defaultSeccomp(t *testing.T, s *specs.Spec) {
	require.NotNil(t, s.Linux.Seccomp)
	require.Equal(t, specs.ActErrno, s.Linux.Seccomp.DefaultAction)
	require.NotEmpty(t, s.Linux.Seccomp.Syscalls)
}

func localSeccomp(t *testing.T, s *specs.Spec) {
	require.NotNil(t, s.Linux.Seccomp)
	require.Equal(t, specs.ActErrno, s.Linux.Seccomp.DefaultAction)
	require.Len(t, s.Linux.Seccomp.Syscalls, 1)
	require.Equal(t, []string{"read", "write"}, s.Linux.Seccomp.Syscalls[0].Names)
}

// allowsSyscall reports whether the profile has an allow rule naming the syscall.
func allowsSyscall(s *specs.Spec, name string) bool {
	for _, sc := range s.Linux.Seccomp.Syscalls {
		if sc.Action != specs.ActAllow {
			continue
		}
		for _, n := range sc.Names {
			if n == name {
				return true
			}
		}
	}
	return false
}

func TestContainerSeccomp(t *testing.T) {
	deprecated := func(p string) func(*Input) { return func(in *Input) { sc(in).SeccompProfilePath = p } }
	withLocal := func(f func(*Input)) func(*Input) {
		return func(in *Input) { f(in); in.SeccompLocalhost = []byte(localProfile) }
	}
	runCases(t, []testCase{
		{name: "nothing asked: unconfined", check: noSeccomp},
		{name: "RuntimeDefault", mutate: seccompProfile(runtimeapi.SecurityProfile_RuntimeDefault, ""), check: defaultSeccomp},
		{name: "RuntimeDefault follows the capabilities", mutate: func(in *Input) {
			seccompProfile(runtimeapi.SecurityProfile_RuntimeDefault, "")(in)
			caps([]string{"SYS_ADMIN"}, nil)(in)
		}, check: func(t *testing.T, s *specs.Spec) { require.True(t, allowsSyscall(s, "mount")) }},
		{name: "RuntimeDefault without SYS_ADMIN denies mount", mutate: seccompProfile(runtimeapi.SecurityProfile_RuntimeDefault, ""),
			check: func(t *testing.T, s *specs.Spec) { require.False(t, allowsSyscall(s, "mount")) }},
		{name: "Unconfined", mutate: seccompProfile(runtimeapi.SecurityProfile_Unconfined, ""), check: noSeccomp},
		{name: "Localhost", mutate: withLocal(seccompProfile(runtimeapi.SecurityProfile_Localhost, "/var/lib/kubelet/seccomp/p.json")),
			check: localSeccomp},
		{name: "Localhost without content", mutate: seccompProfile(runtimeapi.SecurityProfile_Localhost, "/p.json"),
			wantErr: errdefs.ErrInvalidArgument},
		{name: "Localhost with bad JSON", mutate: func(in *Input) {
			seccompProfile(runtimeapi.SecurityProfile_Localhost, "/p.json")(in)
			in.SeccompLocalhost = []byte("{nope")
		}, wantErr: errdefs.ErrInvalidArgument},
		{name: "Localhost without ref", mutate: withLocal(seccompProfile(runtimeapi.SecurityProfile_Localhost, "")),
			wantErr: errdefs.ErrInvalidArgument},
		{name: "RuntimeDefault with a ref", mutate: seccompProfile(runtimeapi.SecurityProfile_RuntimeDefault, "/p.json"),
			wantErr: errdefs.ErrInvalidArgument},
		{name: "unknown type", mutate: seccompProfile(runtimeapi.SecurityProfile_ProfileType(9), ""),
			wantErr: errdefs.ErrInvalidArgument},
		{name: "deprecated runtime/default", mutate: deprecated("runtime/default"), check: defaultSeccomp},
		{name: "deprecated docker/default", mutate: deprecated("docker/default"), check: defaultSeccomp},
		{name: "deprecated unconfined", mutate: deprecated("unconfined"), check: noSeccomp},
		{name: "deprecated localhost/", mutate: withLocal(deprecated("localhost//p.json")), check: localSeccomp},
		{name: "deprecated unknown", mutate: deprecated("bogus"), wantErr: errdefs.ErrInvalidArgument},
		{name: "structured field wins over the deprecated one", mutate: func(in *Input) {
			deprecated("runtime/default")(in)
			seccompProfile(runtimeapi.SecurityProfile_Unconfined, "")(in)
		}, check: noSeccomp},
	})
}

func TestSeccompLocalhostPath(t *testing.T) {
	tests := []struct {
		name string
		sc   *runtimeapi.LinuxContainerSecurityContext
		want string
	}{
		{name: "nil", sc: nil},
		{name: "nothing asked", sc: &runtimeapi.LinuxContainerSecurityContext{}},
		{name: "runtime default", sc: &runtimeapi.LinuxContainerSecurityContext{
			Seccomp: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}}},
		{name: "localhost", want: "/p.json", sc: &runtimeapi.LinuxContainerSecurityContext{
			Seccomp: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "/p.json"}}},
		{name: "localhost ref with prefix", want: "/p.json", sc: &runtimeapi.LinuxContainerSecurityContext{
			Seccomp: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "localhost//p.json"}}},
		{name: "deprecated localhost", want: "/p.json", sc: &runtimeapi.LinuxContainerSecurityContext{SeccompProfilePath: "localhost//p.json"}},
		{name: "privileged needs none", sc: &runtimeapi.LinuxContainerSecurityContext{Privileged: true,
			Seccomp: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "/p.json"}}},
		{name: "invalid", sc: &runtimeapi.LinuxContainerSecurityContext{SeccompProfilePath: "bogus"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { require.Equal(t, tc.want, SeccompLocalhostPath(tc.sc)) })
	}
}

func TestContainerAppArmor(t *testing.T) {
	deprecated := func(p string) func(*Input) { return func(in *Input) { sc(in).ApparmorProfile = p } }
	enabled := func(f func(*Input)) func(*Input) { return func(in *Input) { f(in); in.AppArmorEnabled = true } }
	none := func(t *testing.T, s *specs.Spec) { require.Empty(t, s.Process.ApparmorProfile) }
	runCases(t, []testCase{
		{name: "nothing asked", check: none},
		{name: "disabled: RuntimeDefault runs without a profile", mutate: apparmorProfile(runtimeapi.SecurityProfile_RuntimeDefault, ""), check: none},
		{name: "disabled: Unconfined", mutate: apparmorProfile(runtimeapi.SecurityProfile_Unconfined, ""), check: none},
		{name: "disabled: Localhost is not implemented", mutate: apparmorProfile(runtimeapi.SecurityProfile_Localhost, "my-profile"),
			wantErr: errdefs.ErrNotImplemented},
		{name: "disabled: deprecated localhost/ is not implemented", mutate: deprecated("localhost/my-profile"),
			wantErr: errdefs.ErrNotImplemented},
		{name: "disabled: deprecated runtime/default", mutate: deprecated("runtime/default"), check: none},
		{name: "disabled: deprecated unconfined", mutate: deprecated("unconfined"), check: none},
		{name: "deprecated unknown", mutate: deprecated("my-profile"), wantErr: errdefs.ErrInvalidArgument},
		{name: "Unconfined with a ref", mutate: apparmorProfile(runtimeapi.SecurityProfile_Unconfined, "x"),
			wantErr: errdefs.ErrInvalidArgument},
		{name: "Localhost without ref", mutate: enabled(apparmorProfile(runtimeapi.SecurityProfile_Localhost, "")),
			wantErr: errdefs.ErrInvalidArgument},
		{name: "enabled: Localhost sets the profile", mutate: enabled(apparmorProfile(runtimeapi.SecurityProfile_Localhost, "localhost/my-profile")),
			check: func(t *testing.T, s *specs.Spec) { require.Equal(t, "my-profile", s.Process.ApparmorProfile) }},
		{name: "enabled: RuntimeDefault sets none", mutate: enabled(apparmorProfile(runtimeapi.SecurityProfile_RuntimeDefault, "")), check: none},
	})
}
