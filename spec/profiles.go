package spec

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/containerd/containerd/v2/contrib/apparmor"
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

// AppArmorUsesDefault tells whether a container of sc runs under the runtime's
// default AppArmor profile (Input.AppArmorDefault) where the node has one: it asks
// RuntimeDefault or nothing and is not privileged. The container manager makes sure
// the profile is loaded before it builds such a spec.
func AppArmorUsesDefault(sc *runtimeapi.LinuxContainerSecurityContext) bool {
	sp, err := securityProfile(sc.GetApparmor(), sc.GetApparmorProfile(), secField+".apparmor")
	return err == nil && !sc.GetPrivileged() &&
		(sp == nil || sp.GetProfileType() == runtimeapi.SecurityProfile_RuntimeDefault)
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

// apparmorOpt, as containerd's CRI plugin (sputil.GenerateApparmorSpecOpts):
//
//	asked                   AppArmor on the node           no AppArmor
//	nothing, RuntimeDefault the default profile, if any;   unconfined
//	                        privileged: unconfined
//	Unconfined              unconfined                     unconfined
//	Localhost               that profile (privileged too)  NotImplemented
//
// Nothing asked counts as RuntimeDefault (kubernetes#51746): most pods ask nothing.
// The default profile is Input.AppArmorDefault, loaded by the caller; "" leaves
// those containers unconfined (a node without apparmor_parser, as containerd).
func apparmorOpt(in Input) (oci.SpecOpts, error) {
	const field = secField + ".apparmor"
	sc := in.Config.GetLinux().GetSecurityContext()
	sp, err := securityProfile(sc.GetApparmor(), sc.GetApparmorProfile(), field)
	if err != nil {
		return nil, err
	}
	name := ""
	switch {
	case sp.GetProfileType() == runtimeapi.SecurityProfile_Localhost:
		if !in.AppArmorEnabled {
			return nil, fmt.Errorf("%s: Localhost profile %q: AppArmor is not enabled on this node: %w",
				field, sp.GetLocalhostRef(), errdefs.ErrNotImplemented)
		}
		name = strings.TrimPrefix(sp.GetLocalhostRef(), profileLocalhost)
	case in.AppArmorEnabled && AppArmorUsesDefault(sc):
		name = in.AppArmorDefault
	}
	return apparmor.WithProfile(name), nil
}
