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
	// enabled: the kernel enforces AppArmor, but shimd has no default profile (no
	// apparmor_parser); withDefault: it has one, shimd-default.
	enabled := func(f func(*Input)) func(*Input) { return func(in *Input) { f(in); in.AppArmorEnabled = true } }
	withDefault := func(f func(*Input)) func(*Input) {
		return func(in *Input) { f(in); in.AppArmorEnabled = true; in.AppArmorDefault = "shimd-default" }
	}
	// noKernel: a default name given where the kernel has no AppArmor is ignored.
	noKernel := func(f func(*Input)) func(*Input) {
		return func(in *Input) { f(in); in.AppArmorDefault = "shimd-default" }
	}
	nothing := func(*Input) {}
	privilegedTo := func(f func(*Input)) func(*Input) { return func(in *Input) { f(in); privileged(in) } }
	none := func(t *testing.T, s *specs.Spec) { require.Empty(t, s.Process.ApparmorProfile) }
	profile := func(name string) func(*testing.T, *specs.Spec) {
		return func(t *testing.T, s *specs.Spec) { require.Equal(t, name, s.Process.ApparmorProfile) }
	}
	runtimeDefault := apparmorProfile(runtimeapi.SecurityProfile_RuntimeDefault, "")
	unconfined := apparmorProfile(runtimeapi.SecurityProfile_Unconfined, "")
	localhost := apparmorProfile(runtimeapi.SecurityProfile_Localhost, "localhost/my-profile")
	runCases(t, []testCase{
		{name: "disabled: nothing asked", check: none},
		{name: "disabled: RuntimeDefault runs without a profile", mutate: runtimeDefault, check: none},
		{name: "disabled: Unconfined", mutate: unconfined, check: none},
		{name: "disabled: Localhost is not implemented", mutate: apparmorProfile(runtimeapi.SecurityProfile_Localhost, "my-profile"),
			wantErr: errdefs.ErrNotImplemented},
		{name: "disabled: deprecated localhost/ is not implemented", mutate: deprecated("localhost/my-profile"),
			wantErr: errdefs.ErrNotImplemented},
		{name: "disabled: deprecated runtime/default", mutate: deprecated("runtime/default"), check: none},
		{name: "disabled: deprecated unconfined", mutate: deprecated("unconfined"), check: none},
		{name: "disabled, a default named: nothing asked", mutate: noKernel(nothing), check: none},
		{name: "disabled, a default named: RuntimeDefault", mutate: noKernel(runtimeDefault), check: none},
		{name: "deprecated unknown", mutate: deprecated("my-profile"), wantErr: errdefs.ErrInvalidArgument},
		{name: "Unconfined with a ref", mutate: apparmorProfile(runtimeapi.SecurityProfile_Unconfined, "x"),
			wantErr: errdefs.ErrInvalidArgument},
		{name: "Localhost without ref", mutate: enabled(apparmorProfile(runtimeapi.SecurityProfile_Localhost, "")),
			wantErr: errdefs.ErrInvalidArgument},
		{name: "enabled: Localhost sets the profile", mutate: enabled(localhost), check: profile("my-profile")},
		{name: "enabled, no default: RuntimeDefault sets none", mutate: enabled(runtimeDefault), check: none},
		{name: "enabled, no default: nothing asked sets none", mutate: enabled(nothing), check: none},
		{name: "default: nothing asked gets it", mutate: withDefault(nothing), check: profile("shimd-default")},
		{name: "default: RuntimeDefault gets it", mutate: withDefault(runtimeDefault), check: profile("shimd-default")},
		{name: "default: deprecated runtime/default gets it", mutate: withDefault(deprecated("runtime/default")), check: profile("shimd-default")},
		{name: "default: deprecated docker/default gets it", mutate: withDefault(deprecated("docker/default")), check: profile("shimd-default")},
		{name: "default: Unconfined", mutate: withDefault(unconfined), check: none},
		{name: "default: deprecated unconfined", mutate: withDefault(deprecated("unconfined")), check: none},
		{name: "default: Localhost", mutate: withDefault(localhost), check: profile("my-profile")},
		{name: "default: privileged, nothing asked", mutate: withDefault(privilegedTo(nothing)), check: none},
		{name: "default: privileged, RuntimeDefault", mutate: withDefault(privilegedTo(runtimeDefault)), check: none},
		{name: "default: privileged, Localhost keeps it", mutate: withDefault(privilegedTo(localhost)), check: profile("my-profile")},
		{name: "default: bad profile", mutate: withDefault(deprecated("my-profile")), wantErr: errdefs.ErrInvalidArgument},
	})
}

func TestAppArmorUsesDefault(t *testing.T) {
	tests := []struct {
		name string
		sc   *runtimeapi.LinuxContainerSecurityContext
		want bool
	}{
		{name: "no security context", want: true},
		{name: "nothing asked", sc: &runtimeapi.LinuxContainerSecurityContext{}, want: true},
		{name: "RuntimeDefault", sc: &runtimeapi.LinuxContainerSecurityContext{
			Apparmor: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}}, want: true},
		{name: "deprecated runtime/default", sc: &runtimeapi.LinuxContainerSecurityContext{ApparmorProfile: "runtime/default"}, want: true},
		{name: "privileged", sc: &runtimeapi.LinuxContainerSecurityContext{Privileged: true}},
		{name: "Unconfined", sc: &runtimeapi.LinuxContainerSecurityContext{
			Apparmor: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}}},
		{name: "Localhost", sc: &runtimeapi.LinuxContainerSecurityContext{
			Apparmor: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "p"}}},
		{name: "invalid", sc: &runtimeapi.LinuxContainerSecurityContext{ApparmorProfile: "bogus"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { require.Equal(t, tc.want, AppArmorUsesDefault(tc.sc)) })
	}
}
