//go:build integration

package kubeadm

import (
	"fmt"
	"testing"
)

// flannelManifest is upstream's kube-flannel.yml (v0.28.10) in its parts that
// matter here, with two differences: flanneld is told its interface (--iface=eth0:
// a node has no default route to find it by), and instead of flannel's CNI
// plugin (github.com/flannel-io/cni-plugin, not served by the module proxy), a
// sidecar writes a conflist of the standard bridge + host-local + portmap
// plugins from flanneld's subnet.env, as flannel's plugin would hand them on.
const flannelManifest = `apiVersion: v1
kind: Namespace
metadata:
  name: kube-flannel
  labels: {pod-security.kubernetes.io/enforce: privileged}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: flannel, namespace: kube-flannel}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: flannel}
rules:
- {apiGroups: [""], resources: [pods], verbs: [get]}
- {apiGroups: [""], resources: [nodes], verbs: [get, list, watch]}
- {apiGroups: [""], resources: [nodes/status], verbs: [patch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: flannel}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: flannel}
subjects:
- {kind: ServiceAccount, name: flannel, namespace: kube-flannel}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: kube-flannel-cfg, namespace: kube-flannel}
data:
  net-conf.json: |
    {"Network": "%s", "EnableNFTables": false, "Backend": {"Type": "vxlan"}}
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: kube-flannel-ds, namespace: kube-flannel, labels: {app: flannel}}
spec:
  selector: {matchLabels: {app: flannel}}
  template:
    metadata: {labels: {app: flannel}}
    spec:
      hostNetwork: true
      priorityClassName: system-node-critical
      serviceAccountName: flannel
      tolerations: [{operator: Exists, effect: NoSchedule}]
      containers:
      - name: kube-flannel
        image: %s
        command: [/opt/bin/flanneld]
        args: [--ip-masq, --kube-subnet-mgr, --iface=eth0]
        env:
        - {name: POD_NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}
        - {name: POD_NAMESPACE, valueFrom: {fieldRef: {fieldPath: metadata.namespace}}}
        - {name: EVENT_QUEUE_DEPTH, value: "5000"}
        securityContext:
          privileged: false
          capabilities: {add: [NET_ADMIN, NET_RAW]}
        volumeMounts:
        - {name: run, mountPath: /run/flannel}
        - {name: flannel-cfg, mountPath: /etc/kube-flannel/}
        - {name: xtables-lock, mountPath: /run/xtables.lock}
      - name: cni-conf
        image: %s
        command:
        - sh
        - -c
        - |
          trap 'exit 0' TERM
          while [ ! -s /run/flannel/subnet.env ]; do sleep 1; done
          . /run/flannel/subnet.env
          eval "$(ipcalc -n "$FLANNEL_SUBNET")"
          cat >/etc/cni/net.d/.10-flannel.conflist <<EOC
          {"cniVersion": "0.3.1", "name": "cbr0", "plugins": [
            {"type": "bridge", "bridge": "cni0", "isGateway": true, "isDefaultGateway": true, "ipMasq": false,
             "hairpinMode": true, "mtu": $FLANNEL_MTU,
             "ipam": {"type": "host-local", "ranges": [[{"subnet": "$NETWORK/${FLANNEL_SUBNET#*/}"}]]}},
            {"type": "portmap", "capabilities": {"portMappings": true}}]}
          EOC
          mv /etc/cni/net.d/.10-flannel.conflist /etc/cni/net.d/10-flannel.conflist
          echo "wrote /etc/cni/net.d/10-flannel.conflist for $FLANNEL_SUBNET"
          while :; do sleep 3600 & wait; done
        volumeMounts:
        - {name: run, mountPath: /run/flannel}
        - {name: cni, mountPath: /etc/cni/net.d}
      volumes:
      - {name: run, hostPath: {path: /run/flannel}}
      - {name: cni, hostPath: {path: /etc/cni/net.d}}
      - {name: flannel-cfg, configMap: {name: kube-flannel-cfg}}
      - {name: xtables-lock, hostPath: {path: /run/xtables.lock, type: FileOrCreate}}
`

// FlannelImage is the flannel image of the kubeadm image set.
const FlannelImage = "ghcr.io/flannel-io/flannel:v0.28.10"

func (c *Cluster) installFlannel(t testing.TB) {
	t.Helper()
	c.Apply(t, fmt.Sprintf(flannelManifest, PodSubnet, FlannelImage, FlannelImage))
}
