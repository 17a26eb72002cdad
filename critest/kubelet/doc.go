// Package kubelet runs a real kubelet (v1.37.2, or the release KUBELET_VERSION
// names; standalone: no API server, static pods) on shimd and checks the pods
// through the kubelet's own API (/pods, /containerLogs, /exec, /portForward,
// /stats/summary) and through CRI.
//
// Everything is behind the integration build tag. Run as root:
//
//	make e2e-kubelet
//
// which builds the kubelet with hack/tools.sh (cached) and runs TestKubelet.
// Only one kubelet runs on a host at a time (/run/shimd-e2e-kubelet.lock): the
// kubelet always uses /var/lib/kubelet/device-plugins/kubelet.sock. The test
// saves and restores what the kubelet changes on the host: sysctls, kubepods
// cgroups, /var/log/containers links, /var/lib/kubelet, its root-dir mount.
package kubelet
