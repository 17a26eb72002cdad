package spec

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/containerd/containerd/v2/contrib/seccomp"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Values of the deprecated seccomp_profile_path and apparmor_profile fields.
const (
	profileRuntimeDefault = "runtime/default"
	profileDockerDefault  = "docker/default"
	profileUnconfined     = "unconfined"
	profileLocalhost      = "localhost/"
)

// securityProfile is the profile a field asks for: the structured one, else the
// deprecated string, else nil (nothing asked).
func securityProfile(sp *runtimeapi.SecurityProfile, deprecated, field string) (*runtimeapi.SecurityProfile, error) {
	if sp == nil {
		switch {
		case deprecated == "":
			return nil, nil
		case deprecated == profileRuntimeDefault || deprecated == profileDockerDefault:
			sp = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}
		case deprecated == profileUnconfined:
			sp = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}
		case strings.HasPrefix(deprecated, profileLocalhost):
			sp = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost,
				LocalhostRef: strings.TrimPrefix(deprecated, profileLocalhost)}
		default:
			return nil, invalid(field, "unknown profile %q", deprecated)
		}
	}
	switch sp.GetProfileType() {
	case runtimeapi.SecurityProfile_RuntimeDefault, runtimeapi.SecurityProfile_Unconfined:
		if sp.GetLocalhostRef() != "" {
			return nil, invalid(field, "localhost_ref is only for a Localhost profile")
		}
	case runtimeapi.SecurityProfile_Localhost:
		if strings.TrimPrefix(sp.GetLocalhostRef(), profileLocalhost) == "" {
			return nil, invalid(field, "a Localhost profile needs localhost_ref")
		}
	default:
		return nil, invalid(field, "unknown profile type %d", sp.GetProfileType())
	}
	return sp, nil
}

// SeccompLocalhostPath is the file the caller must read into Input.SeccompLocalhost:
// the Localhost profile's path, or "" when the container needs none (privileged
// containers run without seccomp).
func SeccompLocalhostPath(sc *runtimeapi.LinuxContainerSecurityContext) string {
	sp, err := securityProfile(sc.GetSeccomp(), sc.GetSeccompProfilePath(), secField+".seccomp")
	if err != nil || sc.GetPrivileged() || sp.GetProfileType() != runtimeapi.SecurityProfile_Localhost {
		return ""
	}
	return strings.TrimPrefix(sp.GetLocalhostRef(), profileLocalhost)
}

// AppArmorLocalhostName is the name of the Localhost AppArmor profile sc asks for,
// or "" (the container manager checks that the node has it loaded).
func AppArmorLocalhostName(sc *runtimeapi.LinuxContainerSecurityContext) string {
	sp, err := securityProfile(sc.GetApparmor(), sc.GetApparmorProfile(), secField+".apparmor")
	if err != nil || sp.GetProfileType() != runtimeapi.SecurityProfile_Localhost {
		return ""
	}
	return strings.TrimPrefix(sp.GetLocalhostRef(), profileLocalhost)
}

// seccompOpt: RuntimeDefault is containerd's default profile (computed from the
// capabilities, so it runs after them), Localhost the caller's JSON, Unconfined and
// nothing asked mean no seccomp (containerd's default), as does privileged.
func seccompOpt(in Input) (oci.SpecOpts, error) {
	const field = secField + ".seccomp"
	sc := in.Config.GetLinux().GetSecurityContext()
	sp, err := securityProfile(sc.GetSeccomp(), sc.GetSeccompProfilePath(), field)
	if err != nil {
		return nil, err
	}
	if sp == nil || sc.GetPrivileged() || sp.GetProfileType() == runtimeapi.SecurityProfile_Unconfined {
		return optFunc(func(s *specs.Spec) { s.Linux.Seccomp = nil }), nil
	}
	if sp.GetProfileType() == runtimeapi.SecurityProfile_RuntimeDefault {
		return optFunc(func(s *specs.Spec) { s.Linux.Seccomp = seccomp.DefaultProfile(s) }), nil
	}
	if len(in.SeccompLocalhost) == 0 {
		return nil, invalid(field, "Localhost profile %q: no content", sp.GetLocalhostRef())
	}
	var profile specs.LinuxSeccomp
	if err := json.Unmarshal(in.SeccompLocalhost, &profile); err != nil {
		return nil, invalid(field, "Localhost profile %q: %v", sp.GetLocalhostRef(), err)
	}
	return optFunc(func(s *specs.Spec) { s.Linux.Seccomp = &profile }), nil
}

// apparmorOpt: without AppArmor in the kernel, RuntimeDefault and Unconfined run
// unconfined and a Localhost profile is NotImplemented (the node cannot do it; the
// request is not malformed). With AppArmor, a Localhost profile is set by name;
// RuntimeDefault sets nothing, as shimd loads no default profile of its own.
func apparmorOpt(in Input) (oci.SpecOpts, error) {
	const field = secField + ".apparmor"
	sc := in.Config.GetLinux().GetSecurityContext()
	sp, err := securityProfile(sc.GetApparmor(), sc.GetApparmorProfile(), field)
	if err != nil {
		return nil, err
	}
	name := ""
	if sp.GetProfileType() == runtimeapi.SecurityProfile_Localhost {
		if !in.AppArmorEnabled {
			return nil, fmt.Errorf("%s: Localhost profile %q: AppArmor is not enabled on this node: %w",
				field, sp.GetLocalhostRef(), errdefs.ErrNotImplemented)
		}
		name = strings.TrimPrefix(sp.GetLocalhostRef(), profileLocalhost)
	}
	return optFunc(func(s *specs.Spec) { s.Process.ApparmorProfile = name }), nil
}
