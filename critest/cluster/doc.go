// Package cluster runs a real one-node Kubernetes cluster on shimd: etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler and a kubelet (all
// v1.37.2, or the release KUBELET_VERSION names, built by hack/tools.sh cluster),
// with kubectl as the user's client. Every component listens on loopback; certificates, keys and
// kubeconfigs are generated into a private directory; pods use the CNI bridge in
// 198.18.0.0/15 and images from the offline registry through hosts.toml mirrors.
//
// Run as root:
//
//	make e2e-cluster
//
// The kubelet is the one of critest/kubelet (host state saved and restored, one
// kubelet per host at a time).
package cluster
