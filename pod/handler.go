package pod

import (
	"context"
	"fmt"
	"net"
	"slices"

	"github.com/containerd/errdefs"
)

// Handler is one runtime handler: a containerd runtime (shim) and its options.
type Handler struct {
	Type    string
	Options any // e.g. *options.Options for io.containerd.runc.v2
	// Snapshotter keeps the pod's and its containers' layers.
	Snapshotter string
	// Dialer is set for runtimes whose pods keep their network stack inside their
	// sandbox (gVisor's runsc): port forwarding dials through it.
	Dialer SandboxDialer
	// PauseOptional: runc's shim with an OCI runtime of the host's kernel; its pods
	// may run without a pause container (sandbox/pauseless.go).
	PauseOptional bool
}

// KernelCgroups: the handler's containers run in cgroups of the host kernel, one per
// container, as runc makes them (the runtimes whose pods may go without a pause
// container); a sandboxed runtime's cgroups hold its whole sandbox.
func (h Handler) KernelCgroups() bool { return h.PauseOptional }

// SandboxDialer connects to a port inside a sandboxed pod.
type SandboxDialer interface {
	DialSandbox(ctx context.Context, sandboxID string, port int32) (net.Conn, error)
}

// Handlers are the configured runtime handlers by name; Default names the one for "".
type Handlers struct {
	ByName  map[string]Handler
	Default string
}

// Get resolves a runtime handler name ("" is the default); InvalidArgument if unknown.
func (h Handlers) Get(name string) (Handler, error) {
	if name == "" {
		name = h.Default
	}
	rt, ok := h.ByName[name]
	if !ok {
		return Handler{}, fmt.Errorf("runtime handler %q is not configured: %w", name, errdefs.ErrInvalidArgument)
	}
	return rt, nil
}

// KernelCgroups tells whether the named handler's containers run in cgroups of the
// host kernel (Handler.KernelCgroups); false for an unknown handler.
func (h Handlers) KernelCgroups(name string) bool {
	rt, err := h.Get(name)
	return err == nil && rt.KernelCgroups()
}

// Snapshotters lists the handlers' snapshotters, each once, sorted.
func (h Handlers) Snapshotters() []string {
	var out []string
	for _, rt := range h.ByName {
		if !slices.Contains(out, rt.Snapshotter) {
			out = append(out, rt.Snapshotter)
		}
	}
	slices.Sort(out)
	return out
}
