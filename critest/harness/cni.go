package harness

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// CNIBinDir is where Debian's containernetworking-plugins (v1.1.1) live.
const CNIBinDir = "/usr/lib/cni"

// DefaultNetworkName is the CNI network name WriteCNIConfig uses.
const DefaultNetworkName = "shimd-it"

// testRange is the only range the harness gives pods: 198.18.0.0/15, set
// aside for benchmarking (RFC 2544). Never 10/8, 172.16/12 or 192.168/16:
// the host resolver and CI networks live there.
var testRange = mustCIDR("198.18.0.0/15")

// CNIOptions configures WriteCNIConfig. The zero value is fine.
type CNIOptions struct {
	// Name of the network. Empty: DefaultNetworkName.
	Name string
	// Bridge name, at most 15 bytes. Empty: "shimd" + 6 random hex digits.
	Bridge string
	// Subnet, which must lie inside 198.18.0.0/15. Empty: a random free
	// 198.18.N.0/24 or 198.19.N.0/24.
	Subnet string
	// DataDir is host-local IPAM's lease directory. Empty: "cni-ipam" next
	// to the conf dir (dir/../cni-ipam).
	DataDir string
	// FileName of the conflist in the conf dir. Empty: "10-<Name>.conflist".
	FileName string
	// FirstPlugins go before the bridge in the chain (test plugins; their
	// directory must be in ShimdOptions.CNIBinDirs).
	FirstPlugins []map[string]any
}

// CNINetwork describes a network written by WriteCNIConfig.
type CNINetwork struct {
	first    []map[string]any
	Name     string
	Bridge   string
	Subnet   *net.IPNet
	Gateway  net.IP
	DataDir  string
	ConfPath string
}

// WriteCNIConfig writes a CNI conflist into dir (created if needed): a bridge
// (isGateway, no masquerade, hairpin) with host-local IPAM on a private
// subnet and data dir, then portmap with the portMappings capability. The
// runtime handles loopback itself. It creates the bridge with its gateway
// address right away, which claims the subnet against concurrent runs, and
// sets net.ipv4.conf.all.route_localnet=1 (hostPorts on 127.0.0.1 need it;
// it is left set). At cleanup it removes iptables nat rules that refer to the
// subnet (portmap leftovers) and deletes the bridge.
func WriteCNIConfig(t testing.TB, dir string, opts CNIOptions) *CNINetwork {
	t.Helper()
	n := &CNINetwork{
		first:   opts.FirstPlugins,
		Name:    or(opts.Name, DefaultNetworkName),
		Bridge:  or(opts.Bridge, "shimd"+randHex(3)),
		DataDir: or(opts.DataDir, filepath.Join(filepath.Dir(filepath.Clean(dir)), "cni-ipam")),
	}
	if len(n.Bridge) > 15 {
		t.Fatalf("harness: bridge name %q is longer than 15 bytes", n.Bridge)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("harness: %v", err)
	}
	if err := os.MkdirAll(n.DataDir, 0o700); err != nil {
		t.Fatalf("harness: %v", err)
	}
	t.Cleanup(func() { n.cleanup(t) })
	if err := n.claimSubnet(opts.Subnet); err != nil {
		t.Fatalf("harness: %v", err)
	}
	if err := os.WriteFile("/proc/sys/net/ipv4/conf/all/route_localnet", []byte("1\n"), 0o644); err != nil {
		t.Fatalf("harness: set route_localnet: %v", err)
	}
	n.ConfPath = filepath.Join(dir, or(opts.FileName, "10-"+n.Name+".conflist"))
	b, err := json.MarshalIndent(n.conflist(), "", "  ")
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	if err := os.WriteFile(n.ConfPath, append(b, '\n'), 0o644); err != nil {
		t.Fatalf("harness: %v", err)
	}
	return n
}

func (n *CNINetwork) conflist() map[string]any {
	var plugins []any
	for _, p := range n.first {
		plugins = append(plugins, p)
	}
	return map[string]any{
		"cniVersion": "1.0.0",
		"name":       n.Name,
		"plugins": append(plugins,
			map[string]any{
				"type":        "bridge",
				"bridge":      n.Bridge,
				"isGateway":   true,
				"ipMasq":      false,
				"hairpinMode": true,
				"ipam": map[string]any{
					"type":    "host-local",
					"dataDir": n.DataDir,
					"ranges":  [][]map[string]string{{{"subnet": n.Subnet.String(), "gateway": n.Gateway.String()}}},
					"routes":  []map[string]string{{"dst": "0.0.0.0/0"}},
				},
			},
			map[string]any{
				"type":         "portmap",
				"capabilities": map[string]bool{"portMappings": true},
			},
		),
	}
}

// claimSubnet picks the subnet (or checks the requested one), makes sure no
// interface on the host uses it, and creates the bridge with the gateway
// address so that another run sees it taken.
func (n *CNINetwork) claimSubnet(want string) error {
	for attempt := 0; attempt < 20; attempt++ {
		s := want
		if s == "" {
			i := randInt(512)
			s = fmt.Sprintf("198.%d.%d.0/24", 18+i/256, i%256)
		}
		_, ipn, err := net.ParseCIDR(s)
		if err != nil {
			return fmt.Errorf("CNI subnet: %w", err)
		}
		ones, _ := ipn.Mask.Size()
		if ipn.IP.To4() == nil || ones < 16 || ones > 29 || !testRange.Contains(ipn.IP) {
			return fmt.Errorf("CNI subnet %s must be an IPv4 /16../29 inside %s", s, testRange)
		}
		if used, err := subnetInUse(ipn); err != nil {
			return err
		} else if used != "" {
			if want != "" {
				return fmt.Errorf("CNI subnet %s is already used on this host: %s", s, used)
			}
			continue
		}
		gw := make(net.IP, 4)
		copy(gw, ipn.IP.To4())
		gw[3]++
		n.Subnet, n.Gateway = ipn, gw
		return n.createBridge()
	}
	return fmt.Errorf("no free /24 in %s after 20 tries", testRange)
}

func (n *CNINetwork) createBridge() error {
	// Through netlink, not ip(8): hosts without iproute2 (the many-core cgroup v2
	// test machine) run the harness too.
	ones, _ := n.Subnet.Mask.Size()
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: n.Bridge}}
	if err := netlink.LinkAdd(br); err != nil {
		return fmt.Errorf("adding bridge %s: %w", n.Bridge, err)
	}
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: n.Gateway, Mask: net.CIDRMask(ones, 32)}}
	if err := netlink.AddrAdd(br, addr); err != nil {
		return fmt.Errorf("adding %s to %s: %w", addr.IPNet, n.Bridge, err)
	}
	if err := netlink.LinkSetUp(br); err != nil {
		return fmt.Errorf("setting %s up: %w", n.Bridge, err)
	}
	return nil
}

// subnetInUse names an interface address or route inside ipn, or "".
func subnetInUse(ipn *net.IPNet) (string, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return "", err
	}
	for _, ifc := range ifs {
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if an, ok := a.(*net.IPNet); ok && (ipn.Contains(an.IP) || an.Contains(ipn.IP)) {
				return ifc.Name + " " + an.String(), nil
			}
		}
	}
	// Every table's IPv4 routes, as "ip -4 route show table all" lists them.
	routes, err := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return "", fmt.Errorf("listing routes: %w", err)
	}
	for _, r := range routes {
		if r.Dst == nil || r.Dst.IP.IsUnspecified() {
			continue // a default route
		}
		if ipn.Contains(r.Dst.IP) || r.Dst.Contains(ipn.IP) {
			return "route " + r.String(), nil
		}
	}
	return "", nil
}

// cleanup removes portmap's nat rules for our subnet and the bridge.
func (n *CNINetwork) cleanup(t testing.TB) {
	if n.Subnet != nil {
		if err := deleteNATRules(n.Subnet); err != nil {
			t.Logf("harness: iptables cleanup: %v", err)
		}
	}
	if _, err := net.InterfaceByName(n.Bridge); err == nil {
		if err := netlink.LinkDel(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: n.Bridge}}); err != nil {
			t.Errorf("harness: deleting bridge %s: %v", n.Bridge, err)
		}
	}
}

func randHex(nbytes int) string {
	b := make([]byte, nbytes)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

func randInt(n int64) int {
	v, err := rand.Int(rand.Reader, big.NewInt(n))
	if err != nil {
		panic(err)
	}
	return int(v.Int64())
}

func mustCIDR(s string) *net.IPNet {
	_, n, err := net.ParseCIDR(s)
	if err != nil {
		panic(err)
	}
	return n
}
