package main

import (
	"context"
	"encoding/json"
	"os/exec"
	"slices"
	"time"

	"github.com/containerd/log"
	"github.com/opencontainers/runtime-spec/specs-go/features"

	"github.com/shimd/shimd/container"
)

// runtimeFeatures asks each runtime handler's OCI runtime (`<binary> features`, binary
// by handler; "" for a shim whose runtime shimd does not know) what it supports:
// recursive read-only mounts ("rro") and id-mapped mounts with user namespaces, which
// pods with their own user namespace need. containerd's CRI plugin reads the same
// document (through the shim) with the same rules. A runtime that cannot say
// supports neither.
func runtimeFeatures(ctx context.Context, binaries map[string]string) map[string]container.HandlerFeatures {
	out := map[string]container.HandlerFeatures{}
	for name, bin := range binaries {
		if bin == "" {
			out[name] = container.HandlerFeatures{}
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		data, err := exec.CommandContext(cctx, bin, "features").Output()
		cancel()
		if err != nil {
			log.G(ctx).WithError(err).WithField("runtime", name).Info("OCI runtime reports no features: no rro mounts, no user namespaces")
			out[name] = container.HandlerFeatures{}
			continue
		}
		var f features.Features
		if err := json.Unmarshal(data, &f); err != nil {
			out[name] = container.HandlerFeatures{}
			continue
		}
		hf := container.HandlerFeatures{RecursiveReadOnlyMounts: slices.Contains(f.MountOptions, "rro"), MountOptions: f.MountOptions}
		if l := f.Linux; l != nil && l.MountExtensions != nil && l.MountExtensions.IDMap != nil && l.MountExtensions.IDMap.Enabled != nil {
			hf.UserNamespaces = *l.MountExtensions.IDMap.Enabled && slices.Contains(l.Namespaces, "user")
		}
		out[name] = hf
	}
	return out
}
