package main

import (
	"fmt"
	"path/filepath"
	"sort"

	"github.com/BurntSushi/toml"
	runcoptions "github.com/containerd/containerd/api/types/runc/options"
	runtimeoptions "github.com/containerd/containerd/api/types/runtimeoptions/v1"

	"github.com/shimd/shimd/network"
	"github.com/shimd/shimd/pod"
)

// RunscType is gVisor's containerd shim (containerd-shim-runsc-v1).
const RunscType = "io.containerd.runsc.v1"

// runscShimOptions is the part of the runsc shim's options file (config_path) that
// shimd reads itself: the runsc binary, its root and its flags, to reach into a
// gVisor sandbox for port forwarding and to ask runsc for its features.
type runscShimOptions struct {
	BinaryName  string            `toml:"binary_name"`
	Root        string            `toml:"root"`
	RunscConfig map[string]string `toml:"runsc_config"`
}

// handlerRuntime turns one [runtimes.NAME] table into what sandboxes and containers
// are created with. The runc shim gets runc's options; any other shim gets the
// options containerd's CRI plugin gives it: a type URL and the path of its own
// config file. A runsc handler's file is read here, so that a missing or broken one
// stops shimd at start, naming the key.
func handlerRuntime(cfg Config, name string, rc RuntimeConfig) (pod.Handler, error) {
	snap := rc.Snapshotter
	if snap == "" {
		snap = cfg.Containerd.Snapshotter
	}
	rt := pod.Handler{Type: rc.Type, Snapshotter: snap}
	if isShim(rc.Type, RuncType) {
		rt.Options = &runcoptions.Options{BinaryName: rc.BinaryName, Root: rc.Root, SystemdCgroup: rc.SystemdCgroup}
		// Only runc's shim running an OCI runtime of the host's kernel may run pods
		// without a pause container: a VM or gVisor sandbox is made from the pause.
		rt.PauseOptional = !rc.Sandboxed && !sandboxedBinary(rc.BinaryName)
		return rt, nil
	}
	rt.Options = &runtimeoptions.Options{TypeUrl: rc.Type + ".options", ConfigPath: rc.ConfigPath}
	if isShim(rc.Type, RunscType) {
		r, err := runscOf(cfg, rc)
		if err != nil {
			return rt, fmt.Errorf("config key runtimes.%s.config_path: %w", name, err)
		}
		rt.Dialer = &r
	}
	return rt, nil
}

// runscOf reads the runsc shim's options file (empty path: the shim's defaults).
func runscOf(cfg Config, rc RuntimeConfig) (network.Runsc, error) {
	var o runscShimOptions
	if rc.ConfigPath != "" {
		if _, err := toml.DecodeFile(rc.ConfigPath, &o); err != nil {
			return network.Runsc{}, fmt.Errorf("read the runsc shim's options: %w", err)
		}
	}
	r := network.Runsc{
		Binary:    o.BinaryName,
		Root:      network.SandboxRoot(o.Root, cfg.Containerd.Namespace),
		SocketDir: filepath.Join(cfg.StateDir, "runsc"),
	}
	if r.Binary == "" {
		r.Binary = "runsc"
	}
	keys := make([]string, 0, len(o.RunscConfig))
	for k := range o.RunscConfig {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		// As the shim passes them: every runsc flag as --key=value.
		r.Flags = append(r.Flags, "--"+k+"="+o.RunscConfig[k])
	}
	return r, nil
}

// featuresBinary is the OCI runtime asked for its features: runc's binary_name
// (default runc), runsc's from its options file; none for other shims.
func featuresBinary(rc RuntimeConfig, rt pod.Handler) string {
	switch {
	case isShim(rc.Type, RuncType) && rc.BinaryName != "":
		return rc.BinaryName
	case isShim(rc.Type, RuncType):
		return "runc"
	case rt.Dialer != nil:
		if r, ok := rt.Dialer.(*network.Runsc); ok {
			return r.Binary
		}
	}
	return ""
}

// sandboxedBinary tells whether an OCI runtime binary is known to make a VM or an
// application-kernel sandbox of a pod's first container (runsc, Kata's runtime).
func sandboxedBinary(name string) bool {
	switch filepath.Base(name) {
	case "runsc", "kata-runtime", "kata-qemu", "kata-fc", "runv":
		return true
	}
	return false
}
