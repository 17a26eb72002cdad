// Package kubeadm builds a Kubernetes cluster on shimd the way operators do
// (issue 47): kubeadm init on a first node, kubeadm join on the others, the
// control plane as static pods on shimd, kube-proxy and CoreDNS as kubeadm
// installs them, flannel (VXLAN) as the pod network; everything offline, from
// the image sets of critest/images (mkimages and mkimages -kubeadm).
//
// A node is a set of namespaces on this host: a network namespace with one
// veth on a test bridge (its address in 198.18.0.0/15), a mount namespace in
// which /etc/kubernetes, /var/lib/kubelet, /var/lib/etcd, /var/log/pods,
// /etc/cni/net.d, /var/lib/cni and /run/flannel are the node's own
// directories, and a UTS namespace with the node's hostname. Its containerd,
// shimd, kubelet and kubeadm all run inside them (nsenter), so two kubelets
// never meet at /var/lib/kubelet/device-plugins/kubelet.sock, kube-proxy's
// and flannel's iptables rules stay in the node's network namespace, and the
// kubelets' cgroups live under a cgroup root of their own per node.
// docs/testing.md says why.
//
// Run as root:
//
//	make e2e-kubeadm
package kubeadm
