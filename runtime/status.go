package runtime

import (
	"context"
	"encoding/json"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/container"
)

// Status reports whether containerd answers (RuntimeReady) and a CNI network config is
// loaded (NetworkReady), and the runtime handlers with their features.
func (s *Service) Status(ctx context.Context, req *runtimeapi.StatusRequest) (*runtimeapi.StatusResponse, error) {
	runtimeCond := &runtimeapi.RuntimeCondition{Type: runtimeapi.RuntimeReady, Status: true}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if ok, err := s.opts.Containerd.IsServing(cctx); !ok {
		runtimeCond.Status = false
		runtimeCond.Reason = "ContainerdUnreachable"
		runtimeCond.Message = "containerd does not answer"
		if err != nil {
			runtimeCond.Message += ": " + err.Error()
		}
	}
	networkCond := &runtimeapi.RuntimeCondition{Type: runtimeapi.NetworkReady, Status: true}
	if err := s.opts.Network.Ready(); err != nil {
		networkCond.Status = false
		networkCond.Reason = "NetworkPluginNotReady"
		networkCond.Message = "no CNI network config loaded: " + err.Error()
	} else if w := s.opts.Network.ConfigWarning(); w != "" {
		// Pods still get the last good network: ready, with the problem named.
		networkCond.Reason = "InvalidNetworkConfig"
		networkCond.Message = w
	}
	resp := &runtimeapi.StatusResponse{
		Status: &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{runtimeCond, networkCond}},
		Features: &runtimeapi.RuntimeFeatures{
			// ResolveUser implements Merge and Strict (spec/user.go).
			SupplementalGroupsPolicy: true,
			// Mount.mount_options: checked and applied by spec/mount_options.go.
			MountOptions: true,
			// A pod user namespace with the node's network works wherever the default
			// handler's runtime runs pod user namespaces at all.
			UserNamespacesHostNetwork: s.opts.Node.Handlers[s.opts.Handlers.Default].UserNamespaces,
		},
	}
	for _, h := range s.opts.HandlerNames {
		hf := s.opts.Node.Handlers[h]
		features := &runtimeapi.RuntimeHandlerFeatures{
			RecursiveReadOnlyMounts: hf.RecursiveReadOnlyMounts, UserNamespaces: hf.UserNamespaces,
		}
		resp.RuntimeHandlers = append(resp.RuntimeHandlers, &runtimeapi.RuntimeHandler{Name: h, Features: features})
		if h == s.opts.Handlers.Default {
			// The empty name is the default handler, as the kubelet expects to find it.
			resp.RuntimeHandlers = append(resp.RuntimeHandlers, &runtimeapi.RuntimeHandler{Features: features})
		}
	}
	if req.GetVerbose() {
		resp.Info = map[string]string{"config": s.opts.ConfigJSON, "network": s.opts.Network.Describe(),
			"apparmor": appArmorInfo(s.opts.Node), "selinux": selinuxInfo(s.opts.Node.SELinux)}
	}
	return resp, nil
}

// RuntimeConfig reports the cgroup driver, so the kubelet can match it.
func (s *Service) RuntimeConfig(_ context.Context, _ *runtimeapi.RuntimeConfigRequest) (*runtimeapi.RuntimeConfigResponse, error) {
	driver := runtimeapi.CgroupDriver_CGROUPFS
	if s.opts.CgroupDriver == "systemd" {
		driver = runtimeapi.CgroupDriver_SYSTEMD
	}
	return &runtimeapi.RuntimeConfigResponse{Linux: &runtimeapi.LinuxRuntimeConfiguration{CgroupDriver: driver}}, nil
}

// UpdateRuntimeConfig keeps the node's pod CIDR for CNI plugins that take ranges.
func (s *Service) UpdateRuntimeConfig(_ context.Context, req *runtimeapi.UpdateRuntimeConfigRequest) (*runtimeapi.UpdateRuntimeConfigResponse, error) {
	if cidr := req.GetRuntimeConfig().GetNetworkConfig().GetPodCidr(); cidr != "" {
		s.opts.Network.SetPodCIDR(cidr)
	}
	return &runtimeapi.UpdateRuntimeConfigResponse{}, nil
}

// appArmorInfo is Status's "apparmor" entry (crictl info): whether the kernel
// enforces AppArmor and the profile of containers that ask RuntimeDefault or nothing.
func appArmorInfo(node container.NodeInfo) string {
	info := struct {
		Enabled        bool   `json:"enabled"`
		DefaultProfile string `json:"defaultProfile"`
		Note           string `json:"note,omitempty"`
	}{Enabled: node.AppArmor, DefaultProfile: node.AppArmorDefault}
	switch {
	case !node.AppArmor:
		info.Note = "no AppArmor in the kernel: containers run unconfined"
	case node.AppArmorDefault == "":
		info.Note = "no apparmor_parser: containers that ask RuntimeDefault or nothing run unconfined"
	default:
		info.Note = "containers that ask RuntimeDefault or nothing run under the default profile, privileged ones unconfined"
	}
	b, _ := json.Marshal(info)
	return string(b)
}

// selinuxInfo is Status's "selinux" entry (crictl info): whether pods and containers
// get SELinux labels, and why not.
func selinuxInfo(n container.SELinuxNode) string {
	info := struct {
		Enabled      bool   `json:"enabled"`
		Enforcing    bool   `json:"enforcing"`
		ProcessLabel string `json:"processLabel,omitempty"`
		FileLabel    string `json:"fileLabel,omitempty"`
		Note         string `json:"note,omitempty"`
	}{Enabled: n.Labels(), Enforcing: n.Enforcing, ProcessLabel: n.ProcessLabel, FileLabel: n.FileLabel}
	switch {
	case !n.Kernel:
		info.Note = "no SELinux in the kernel"
	case !n.Configured:
		info.Note = "enable_selinux is false: containers run under the runtime's own label"
	case n.ProcessLabel == "":
		info.Note = "the policy has no contexts/lxc_contexts: containers run under the runtime's own label"
	case !n.Enforcing:
		info.Note = "permissive: each pod has its MCS level, denials are only logged"
	default:
		info.Note = "each pod has its MCS level; privileged containers run under the runtime's label"
	}
	b, _ := json.Marshal(info)
	return string(b)
}
