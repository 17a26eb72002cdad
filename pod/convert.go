package pod

import (
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// CRIState is the state as the CRI names it.
func (st State) CRIState() runtimeapi.PodSandboxState {
	if st == Ready {
		return runtimeapi.PodSandboxState_SANDBOX_READY
	}
	return runtimeapi.PodSandboxState_SANDBOX_NOTREADY
}

// CRI is the pod as ListPodSandbox reports it.
func (sb Pod) CRI() *runtimeapi.PodSandbox {
	return &runtimeapi.PodSandbox{
		Id:             sb.ID,
		Metadata:       sb.Config.GetMetadata(),
		State:          sb.State.CRIState(),
		CreatedAt:      sb.CreatedAt.UnixNano(),
		Labels:         sb.Config.GetLabels(),
		Annotations:    sb.Config.GetAnnotations(),
		RuntimeHandler: sb.RuntimeHandler,
	}
}

// CRIStatus is the pod's status as PodSandboxStatus and container events report it.
func (sb Pod) CRIStatus() *runtimeapi.PodSandboxStatus {
	st := &runtimeapi.PodSandboxStatus{
		Id:             sb.ID,
		Metadata:       sb.Config.GetMetadata(),
		State:          sb.State.CRIState(),
		CreatedAt:      sb.CreatedAt.UnixNano(),
		Network:        &runtimeapi.PodSandboxNetworkStatus{},
		Labels:         sb.Config.GetLabels(),
		Annotations:    sb.Config.GetAnnotations(),
		RuntimeHandler: sb.RuntimeHandler,
		Linux: &runtimeapi.LinuxPodSandboxStatus{Namespaces: &runtimeapi.Namespace{
			Options: namespaceOptions(sb.Config),
		}},
	}
	if len(sb.IPs) > 0 {
		st.Network.Ip = sb.IPs[0]
		for _, ip := range sb.IPs[1:] {
			st.Network.AdditionalIps = append(st.Network.AdditionalIps, &runtimeapi.PodIP{Ip: ip})
		}
	}
	return st
}

// namespaceOptions reports the pod's namespace modes; CONTAINER for an unset pid mode
// is reported as POD, as the kubelet reads it.
func namespaceOptions(cfg *runtimeapi.PodSandboxConfig) *runtimeapi.NamespaceOption {
	ns := cfg.GetLinux().GetSecurityContext().GetNamespaceOptions()
	return &runtimeapi.NamespaceOption{
		Network:       ns.GetNetwork(),
		Pid:           ns.GetPid(),
		Ipc:           ns.GetIpc(),
		TargetId:      ns.GetTargetId(),
		UsernsOptions: ns.GetUsernsOptions(),
	}
}

// LabelsMatch tells whether labels has every key=value of the selector.
func LabelsMatch(labels, selector map[string]string) bool {
	for k, v := range selector {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}
