package container

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"tags.cncf.io/container-device-interface/pkg/cdi"
)

// CDI (Container Device Interface): a container asks for devices by fully qualified
// name (vendor.com/class=name), in ContainerConfig.cdi_devices or in annotations
// "cdi.k8s.io/<key>" = "name[,name...]" (the device plugins' way). The names are
// resolved against the CDI spec files of the configured directories (cmd/shimd keeps
// a cdi.Cache that watches them) and their edits (device nodes, mounts, env, hooks)
// are applied to the OCI spec, after shimd's own spec is built and before the
// containerd container is created. CreateContainer checks the names before it creates
// anything: an unknown or ambiguous device is InvalidArgument naming it.

// CDIRegistry resolves CDI devices; *cdi.Cache implements it.
type CDIRegistry interface {
	// InjectDevices applies the devices' edits to spec and returns the names it
	// could not resolve.
	InjectDevices(spec *specs.Spec, devices ...string) ([]string, error)
	// GetErrors lists the errors of each spec file, by path.
	GetErrors() map[string][]error
}

// cdiDevices lists the CDI devices cfg requests: cdi_devices in order, then those of
// the cdi.k8s.io/ annotations (by key), each once. A malformed annotation is
// InvalidArgument.
func cdiDevices(cfg *runtimeapi.ContainerConfig) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	add := func(d string) {
		if !seen[d] {
			seen[d] = true
			out = append(out, d)
		}
	}
	for _, d := range cfg.GetCDIDevices() {
		add(d.GetName())
	}
	var keys []string
	for k := range cfg.GetAnnotations() {
		if strings.HasPrefix(k, cdi.AnnotationPrefix) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		_, devs, err := cdi.ParseAnnotations(map[string]string{k: cfg.GetAnnotations()[k]})
		if err != nil {
			return nil, invalid("config.annotations["+strconv.Quote(k)+"]", "%v", err)
		}
		for _, d := range devs {
			add(d)
		}
	}
	return out, nil
}

// check tells whether the devices cfg requests all resolve, without touching
// anything: an unknown, ambiguous or malformed name is InvalidArgument naming it;
// any device requested while CDI is off is FailedPrecondition.
// cdiInjector resolves and injects the CDI devices containers ask for.
type cdiInjector struct {
	registry CDIRegistry // nil: CDI is off
}

func (d cdiInjector) check(cfg *runtimeapi.ContainerConfig) error {
	devs, err := cdiDevices(cfg)
	if err != nil || len(devs) == 0 {
		return err
	}
	if d.registry == nil {
		return fmt.Errorf("config.cdi_devices: CDI device %s requested, but CDI is turned off (config key cdi.enabled): %w", quote(devs[0]), errdefs.ErrFailedPrecondition)
	}
	scratch := &specs.Spec{Process: &specs.Process{}, Linux: &specs.Linux{}}
	return d.injectDevices(scratch, devs)
}

// inject applies the edits of the CDI devices cfg requests to ociSpec.
func (d cdiInjector) inject(ociSpec *specs.Spec, cfg *runtimeapi.ContainerConfig) error {
	devs, err := cdiDevices(cfg)
	if err != nil || len(devs) == 0 {
		return err
	}
	if d.registry == nil {
		return fmt.Errorf("config.cdi_devices: CDI device %s requested, but CDI is turned off (config key cdi.enabled): %w", quote(devs[0]), errdefs.ErrFailedPrecondition)
	}
	return d.injectDevices(ociSpec, devs)
}

func (d cdiInjector) injectDevices(ociSpec *specs.Spec, devs []string) error {
	unresolved, err := d.registry.InjectDevices(ociSpec, devs...)
	if len(unresolved) > 0 {
		return invalid("config.cdi_devices", "%s", describeUnresolved(unresolved, d.registry.GetErrors()))
	}
	if err != nil {
		return invalid("config.cdi_devices", "inject CDI devices %s: %v", strings.Join(devs, ", "), err)
	}
	return nil
}

// describeUnresolved names each device that did not resolve and why: defined by two
// spec files of equal priority (ambiguous), not a qualified name, or unknown.
func describeUnresolved(names []string, specErrors map[string][]error) string {
	var parts []string
	for _, n := range names {
		switch {
		case conflictOf(n, specErrors) != "":
			parts = append(parts, fmt.Sprintf("CDI device %s is ambiguous: %s", quote(n), conflictOf(n, specErrors)))
		case !strings.Contains(n, "=") || !strings.Contains(n, "/"):
			parts = append(parts, fmt.Sprintf("CDI device %s is not a fully qualified name (vendor.com/class=name)", quote(n)))
		default:
			parts = append(parts, fmt.Sprintf("unknown CDI device %s (no CDI spec file defines it)", quote(n)))
		}
	}
	return strings.Join(parts, "; ")
}

// conflictOf is the cache's conflict error for device name, if any.
func conflictOf(name string, specErrors map[string][]error) string {
	needle := "conflicting device " + strconv.Quote(name)
	paths := make([]string, 0, len(specErrors))
	for p := range specErrors {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		for _, err := range specErrors[p] {
			if strings.Contains(err.Error(), needle) {
				return err.Error()
			}
		}
	}
	return ""
}
