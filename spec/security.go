package spec

import (
	"fmt"
	"slices"
	"strings"

	"github.com/containerd/containerd/v2/pkg/cap"
	"github.com/containerd/containerd/v2/pkg/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/seclabel"
)

const secField = "config.linux.security_context"

// securityOpts: capabilities, privileged, masked and read-only paths, then the seccomp
// and AppArmor profiles, then the SELinux labels the caller made (Input.SELinux*).
func securityOpts(in Input) ([]oci.SpecOpts, error) {
	sc := in.Config.GetLinux().GetSecurityContext()
	all := allCapabilities(in.AllCapabilities)
	opts, err := capabilityOpts(sc.GetCapabilities(), all)
	if err != nil {
		return nil, err
	}
	// Masked and read-only paths: the CRI lists are authoritative, as in containerd
	// 2.x and CRI-O. The kubelet sends its default lists for procMount Default and
	// empty ones for Unmasked; over gRPC an empty list arrives as nil, so nil means
	// "mask nothing", never "the runtime's defaults".
	opts = append(opts,
		oci.WithMaskedPaths(slices.Clone(sc.GetMaskedPaths())),
		oci.WithReadonlyPaths(slices.Clone(sc.GetReadonlyPaths())))
	if sc.GetPrivileged() {
		if !in.SandboxConfig.GetLinux().GetSecurityContext().GetPrivileged() {
			return nil, invalid(secField+".privileged", "the pod is not privileged")
		}
		opts = append(opts, withCapabilities(all),
			oci.WithMaskedPaths(nil), oci.WithReadonlyPaths(nil), withHostDevices(in.HostDevices))
	}
	seccomp, err := seccompOpt(in)
	if err != nil {
		return nil, err
	}
	apparmor, err := apparmorOpt(in)
	if err != nil {
		return nil, err
	}
	return append(opts, seccomp, apparmor, optFunc(func(s *specs.Spec) {
		seclabel.SetSpec(s, in.SELinuxProcessLabel, in.SELinuxMountLabel, sc.GetPrivileged())
	})), nil
}

// capabilityOpts applies the config's capabilities to the runtime's default set.
// "ALL" is handled first so that single names still apply after it: add ALL and drop
// CHOWN gives everything but CAP_CHOWN; drop ALL and add CHOWN gives only CAP_CHOWN.
// Names may carry the CAP_ prefix or not, in any case. Ambient capabilities are empty
// unless asked for (containerd clears them; they also enter the other sets).
func capabilityOpts(c *runtimeapi.Capability, all []string) ([]oci.SpecOpts, error) {
	add, addAll, err := capNames(c.GetAddCapabilities(), "add_capabilities")
	if err != nil {
		return nil, err
	}
	drop, dropAll, err := capNames(c.GetDropCapabilities(), "drop_capabilities")
	if err != nil {
		return nil, err
	}
	ambient, ambientAll, err := capNames(c.GetAddAmbientCapabilities(), "add_ambient_capabilities")
	if err != nil {
		return nil, err
	}
	if ambientAll {
		return nil, invalid(secField+".capabilities.add_ambient_capabilities", "ALL is not allowed")
	}
	opts := []oci.SpecOpts{withoutAmbient}
	if addAll {
		opts = append(opts, withCapabilities(all))
	}
	if dropAll {
		opts = append(opts, withCapabilities(nil))
	}
	opts = append(opts, oci.WithAddedCapabilities(add), oci.WithDroppedCapabilities(drop))
	if len(ambient) > 0 {
		opts = append(opts, oci.WithAddedCapabilities(ambient), optFunc(func(s *specs.Spec) {
			s.Process.Capabilities.Ambient = ambient
			s.Process.Capabilities.Inheritable = slices.Clone(ambient)
		}))
	}
	return opts, nil
}

// capNames normalises CRI capability names to CAP_XXX; all reports an "ALL" entry.
func capNames(names []string, field string) (caps []string, all bool, err error) {
	for i, n := range names {
		u := strings.ToUpper(strings.TrimSpace(n))
		switch {
		case u == "ALL":
			all = true
			continue
		case u == "" || u == "CAP_":
			return nil, false, invalid(fmt.Sprintf("%s.capabilities.%s[%d]", secField, field, i), "empty name")
		case !strings.HasPrefix(u, "CAP_"):
			u = "CAP_" + u
		}
		if !slices.Contains(caps, u) {
			caps = append(caps, u)
		}
	}
	return caps, all, nil
}

// allCapabilities normalises the caller's list, defaulting to every known capability.
func allCapabilities(given []string) []string {
	if len(given) == 0 {
		return cap.Known()
	}
	out := make([]string, 0, len(given))
	for _, c := range given {
		u := strings.ToUpper(c)
		if !strings.HasPrefix(u, "CAP_") {
			u = "CAP_" + u
		}
		out = append(out, u)
	}
	return out
}

// withCapabilities sets the bounding, effective and permitted sets, each its own copy
// (oci.WithCapabilities shares one slice between them).
func withCapabilities(caps []string) oci.SpecOpts {
	return optFunc(func(s *specs.Spec) {
		c := s.Process.Capabilities
		c.Bounding, c.Effective, c.Permitted = slices.Clone(caps), slices.Clone(caps), slices.Clone(caps)
		c.Inheritable = slices.DeleteFunc(c.Inheritable, func(n string) bool { return !slices.Contains(caps, n) })
	})
}

var withoutAmbient = optFunc(func(s *specs.Spec) {
	s.Process.Capabilities.Ambient = nil
})
