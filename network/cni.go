// Package network attaches pod network namespaces to CNI networks and forwards ports
// into them. It knows nothing of containerd.
package network

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
)

// Options configures the CNI manager.
type Options struct {
	ConfDir  string
	BinDirs  []string
	CacheDir string
	// Observer, if set, is told about every CNI ADD ("add") and DEL ("del").
	Observer func(op string, d time.Duration, err error)
}

// CNI runs CNI plugins for pods. The network is the first config (by file name) in
// ConfDir, loaded at start, again whenever Watch sees the directory change and, while
// none could be loaded, again on each use. A pod is torn down with the config it was
// set up with (libcni's cache keeps it), whatever the directory holds by then.
//
// Lock order: mu only; never held while a plugin runs.
type CNI struct {
	opts Options
	cni  *libcni.CNIConfig

	mu sync.Mutex
	// list is the network in use: the last config that loaded.
	list *libcni.NetworkConfigList
	// noPorts is list less its portmap plugins, for pods that map no port; nil
	// when list has none.
	noPorts *libcni.NetworkConfigList
	// listFile is the file list came from.
	listFile string
	// loadErr is the last load's failure (nil once a load succeeds).
	loadErr error
	podCIDR string
}

// PortMapping is one hostPort mapping (portmap capability).
type PortMapping struct {
	HostPort      int32  `json:"hostPort"`
	ContainerPort int32  `json:"containerPort"`
	Protocol      string `json:"protocol"`
	HostIP        string `json:"hostIP,omitempty"`
}

// Bandwidth is the bandwidth capability, in bits per second.
type Bandwidth struct {
	IngressRate  uint64 `json:"ingressRate,omitempty"`
	IngressBurst uint64 `json:"ingressBurst,omitempty"`
	EgressRate   uint64 `json:"egressRate,omitempty"`
	EgressBurst  uint64 `json:"egressBurst,omitempty"`
}

// Attachment describes the pod being attached.
type Attachment struct {
	ID        string
	NetNSPath string
	// Args are the CNI_ARGS (K8S_POD_NAMESPACE, K8S_POD_NAME, ...).
	Args         [][2]string
	PortMappings []PortMapping
	Bandwidth    *Bandwidth
	CgroupPath   string
}

// Result is what an attachment got.
type Result struct {
	IPs []net.IP
}

// NewCNI prepares a CNI manager; a missing or invalid config is reported by Ready.
func NewCNI(opts Options) (*CNI, error) {
	c := &CNI{
		opts: opts,
		cni:  libcni.NewCNIConfigWithCacheDir(opts.BinDirs, opts.CacheDir, nil),
	}
	c.Reload()
	return c, nil
}

// SetPodCIDR keeps the node's pod CIDR, handed to IPAM plugins that take ranges.
func (c *CNI) SetPodCIDR(cidr string) {
	c.mu.Lock()
	c.podCIDR = cidr
	c.mu.Unlock()
}

func (c *CNI) runtimeConf(a Attachment, ifName string) *libcni.RuntimeConf {
	caps := map[string]interface{}{}
	if len(a.PortMappings) > 0 {
		caps["portMappings"] = a.PortMappings
	}
	if a.Bandwidth != nil {
		caps["bandwidth"] = a.Bandwidth
	}
	c.mu.Lock()
	if c.podCIDR != "" {
		caps["ipRanges"] = [][]map[string]string{{{"subnet": c.podCIDR}}}
	}
	c.mu.Unlock()
	if a.CgroupPath != "" {
		caps["cgroupPath"] = a.CgroupPath
	}
	return &libcni.RuntimeConf{
		ContainerID:    a.ID,
		NetNS:          a.NetNSPath,
		IfName:         ifName,
		Args:           append([][2]string{{"IgnoreUnknown", "1"}}, a.Args...),
		CapabilityArgs: caps,
	}
}

// Setup brings loopback up (directly over netlink: it needs no plugin) and attaches the pod to the network as eth0.
func (c *CNI) Setup(ctx context.Context, a Attachment) (res *Result, err error) {
	list, err := c.networkFor(a)
	if err != nil {
		return nil, err
	}
	if err := loopbackUp(a.NetNSPath); err != nil {
		return nil, err
	}
	defer c.observe("add", time.Now(), &err)
	r, err := c.cni.AddNetworkList(ctx, list, c.runtimeConf(a, "eth0"))
	if err != nil {
		// A plugin failure (IPAM, bridge, portmap) is the network's, not the request's:
		// Unavailable, with the plugin's message.
		return nil, fmt.Errorf("cni add network %s: %w", list.Name, classifyCNI(err))
	}
	res, err = parseResult(r)
	if err != nil {
		return nil, err
	}
	// Best effort: neighbours that cached a previous owner of the address learn the
	// new one (announce.go); a failure leaves the pod as the plugin made it.
	if err := announce(a.NetNSPath, r); err != nil {
		log.G(ctx).WithError(err).WithField("sandbox", a.ID).Warn("announce pod addresses")
	}
	return res, nil
}

// Teardown detaches the pod (CNI DEL) with the config it was attached with, kept in
// libcni's cache by ADD; without a cache entry, with the current config. It succeeds
// for a pod never attached. An empty NetNSPath still releases the IPAM lease (CNI
// allows DEL without a netns), as does a path that is no longer a namespace.
func (c *CNI) Teardown(ctx context.Context, a Attachment) (err error) {
	if a.NetNSPath != "" && !IsNamespace(a.NetNSPath) {
		// Gone, or unpinned by a stop a crash cut short: plugins refuse a path that
		// is no namespace, and DEL without one still releases the IPAM lease.
		a.NetNSPath = ""
	}
	rt := c.runtimeConf(a, "eth0")
	list, cachedRT, err := c.cachedNetwork(rt)
	if err != nil {
		return err
	}
	if list == nil {
		if list, err = c.networkFor(a); err != nil {
			return err
		}
	} else {
		rt = cachedRT
	}
	defer c.observe("del", time.Now(), &err)
	if err := c.cni.DelNetworkList(ctx, list, rt); err != nil {
		return fmt.Errorf("cni del network %s: %w", list.Name, classifyCNI(err))
	}
	return nil
}

// Attached reports whether libcni's cache still holds an attachment of the pod
// id: a successful ADD writes it and a finished DEL removes it. The cache is on
// disk (cache_dir, /var/lib/cni/cache), so it outlives a reboot that took the
// pod's namespace with /run. An unreadable cache counts as attached: a DEL too
// many is harmless, a lease kept is not.
func (c *CNI) Attached(id string) bool {
	atts, err := c.cni.GetCachedAttachments(id)
	if err != nil {
		return true
	}
	for _, att := range atts {
		if att.ContainerID == id {
			return true
		}
	}
	return false
}

// cachedNetwork finds the config list an ADD of rt's container and interface cached,
// and rt with the cached CNI args and capabilities; nil if nothing is cached.
func (c *CNI) cachedNetwork(rt *libcni.RuntimeConf) (*libcni.NetworkConfigList, *libcni.RuntimeConf, error) {
	atts, err := c.cni.GetCachedAttachments(rt.ContainerID)
	if err != nil {
		return nil, nil, fmt.Errorf("read cni cache of %s: %w", rt.ContainerID, err)
	}
	for _, att := range atts {
		if att.IfName != rt.IfName || att.ContainerID != rt.ContainerID {
			continue
		}
		b, cached, err := c.cni.GetNetworkListCachedConfig(&libcni.NetworkConfigList{Name: att.Network}, rt)
		if err != nil || len(b) == 0 {
			continue
		}
		list, err := libcni.ConfListFromBytes(b)
		if err != nil {
			return nil, nil, fmt.Errorf("cached cni config of %s: %w", rt.ContainerID, err)
		}
		return list, cached, nil
	}
	return nil, nil, nil
}

func (c *CNI) observe(op string, start time.Time, err *error) {
	if c.opts.Observer != nil {
		c.opts.Observer(op, time.Since(start), *err)
	}
}

func parseResult(res types.Result) (*Result, error) {
	r, err := types100.NewResultFromResult(res)
	if err != nil {
		return nil, fmt.Errorf("cni result: %w", err)
	}
	// Prefer addresses on the sandbox side (an interface with a Sandbox path).
	out := &Result{}
	for _, ip := range r.IPs {
		if ip.Interface != nil && *ip.Interface >= 0 && *ip.Interface < len(r.Interfaces) &&
			r.Interfaces[*ip.Interface].Sandbox == "" {
			continue
		}
		out.IPs = append(out.IPs, ip.Address.IP)
	}
	if len(out.IPs) == 0 {
		return nil, fmt.Errorf("cni result has no pod address: %w", errdefs.ErrUnavailable)
	}
	// IPv4 first, as the kubelet expects the primary family first.
	for i, ip := range out.IPs {
		if ip.To4() != nil && i > 0 {
			out.IPs[0], out.IPs[i] = out.IPs[i], out.IPs[0]
			break
		}
	}
	return out, nil
}

// classifyCNI keeps the class of an error that has one (a cancelled context) and
// makes a plugin's failure Unavailable.
func classifyCNI(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || !errdefs.IsUnknown(errdefs.Resolve(err)) {
		return err
	}
	return fmt.Errorf("%w: %w", err, errdefs.ErrUnavailable)
}
