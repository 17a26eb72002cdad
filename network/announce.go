package network

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"unsafe"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"golang.org/x/sys/unix"
)

// Why a pod announces its addresses after CNI ADD
//
// IPAM hands out the address of a deleted pod again. The host (and every pod on the
// same bridge) may still hold a neighbour entry for that address with the old pod's
// MAC address: a REACHABLE entry is used without a check for 15 to 45 s after the
// last reply, and a STALE one (kept for good while the table is small) costs 5 s of
// DELAY and 3 s of unicast probes to the old MAC before the kernel asks anew. Until
// then, packets to the new pod go to a MAC that no port has, and the kubelet's probes,
// which come from the host, time out: measured here with the bridge plugin, a TCP
// connect to a new pod on a reused address took 11.4 s (STALE entry) or did not
// succeed within 20 s (REACHABLE entry).
//
// The bridge plugin sets arp_notify on the pod's interface so that the kernel sends
// a gratuitous ARP when the interface comes up, but at that moment the host end of
// the veth has no carrier on the bridge yet and the bridge drops the frame: no ARP at
// all reaches the bridge during an ADD. After ADD, the plugin has seen the host end
// up, the port forwards, and one gratuitous ARP from the pod replaces the stale
// entries (the kernel takes a gratuitous ARP as an override of the cached address).
// Docker sends such announcements for the same reason.

// announce sends one gratuitous ARP (an ARP announcement, RFC 5227) for each IPv4
// address the CNI result gave an interface inside the namespace at netnsPath, from
// that interface. Interfaces without a 6-byte hardware address (no ARP) are skipped.
// IPv6 neighbours are left as they are.
func announce(netnsPath string, res types.Result) error {
	r, err := types100.NewResultFromResult(res)
	if err != nil {
		return err
	}
	byIface := map[string][]net.IP{}
	for _, ip := range r.IPs {
		if ip.Interface == nil || *ip.Interface < 0 || *ip.Interface >= len(r.Interfaces) {
			continue
		}
		ifc := r.Interfaces[*ip.Interface]
		if v4 := ip.Address.IP.To4(); v4 != nil && ifc.Sandbox != "" && ifc.Name != "" {
			byIface[ifc.Name] = append(byIface[ifc.Name], v4)
		}
	}
	if len(byIface) == 0 {
		return nil
	}
	return InNetNS(netnsPath, func() error {
		var errs []error
		for name, ips := range byIface {
			if err := announceOn(name, ips); err != nil {
				errs = append(errs, fmt.Errorf("announce %v on %s: %w", ips, name, err))
			}
		}
		return errors.Join(errs...)
	})
}

// announceOn sends the announcements on the interface name of the current network
// namespace. It learns the interface by ioctl, not netlink: the kernel answers
// SIOCGIFFLAGS, SIOCGIFINDEX and SIOCGIFHWADDR under RCU, where an RTM_GETLINK waits
// for the RTNL lock, which a burst of pod network setups (namespaces, veth pairs,
// bridge ports) holds most of the time. Asked by netlink, the lookup took up to 3.1 s
// (p90 1.8 s) per pod in a burst of 100 pods on 2 cores (docs/benchmarks.md).
func announceOn(name string, ips []net.IP) error {
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ARP)))
	if err != nil {
		return err
	}
	// Closed on another goroutine: the kernel waits for an RCU grace period
	// (synchronize_net in packet_release) before a packet socket's close returns,
	// 12 ms on an idle 2-core machine and hundreds in a burst, which the pod need not
	// wait for. The frames are sent by then (packet_snd transmits synchronously).
	defer func() { go unix.Close(fd) }()
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("flags: %w", err)
	}
	if ifr.Uint16()&unix.IFF_NOARP != 0 {
		return nil
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFINDEX, ifr); err != nil {
		return fmt.Errorf("index: %w", err)
	}
	index := int(ifr.Uint32())
	mac, err := hardwareAddr(fd, name)
	if err != nil {
		return fmt.Errorf("hardware address: %w", err)
	}
	if len(mac) != 6 {
		return nil
	}
	to := &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ARP), Ifindex: index, Halen: 6,
		Addr: [8]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}}
	for _, ip := range ips {
		if err := unix.Sendto(fd, arpAnnouncement(mac, ip), 0, to); err != nil {
			return err
		}
	}
	return nil
}

// ifreqHW is struct ifreq with its union read as the struct sockaddr SIOCGIFHWADDR
// fills in.
type ifreqHW struct {
	Name   [unix.IFNAMSIZ]byte
	Family uint16
	Data   [14]byte
	_      [8]byte // the rest of the union
}

// hardwareAddr is the Ethernet address of the interface name (SIOCGIFHWADDR on any
// socket fd of the namespace), or nil for an interface of another hardware type.
func hardwareAddr(fd int, name string) (net.HardwareAddr, error) {
	var req ifreqHW
	if len(name) >= len(req.Name) {
		return nil, fmt.Errorf("interface name %q is too long", name)
	}
	copy(req.Name[:], name)
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCGIFHWADDR, uintptr(unsafe.Pointer(&req))); errno != 0 {
		return nil, errno
	}
	if req.Family != unix.ARPHRD_ETHER {
		return nil, nil
	}
	return net.HardwareAddr(append([]byte(nil), req.Data[:6]...)), nil
}

// arpAnnouncement is an ARP request for ip from (mac, ip) with an empty target
// hardware address: what the kernel's own arp_notify sends.
func arpAnnouncement(mac net.HardwareAddr, ip net.IP) []byte {
	b := make([]byte, 28)
	binary.BigEndian.PutUint16(b[0:], 1)      // hardware type: Ethernet
	binary.BigEndian.PutUint16(b[2:], 0x0800) // protocol type: IPv4
	b[4], b[5] = 6, 4                         // address lengths
	binary.BigEndian.PutUint16(b[6:], 1)      // request
	copy(b[8:14], mac)
	copy(b[14:18], ip.To4())
	copy(b[24:28], ip.To4()) // target IP = sender IP: gratuitous
	return b
}

// htons is v in network byte order, as AF_PACKET wants the protocol.
func htons(v uint16) uint16 { return binary.NativeEndian.Uint16(binary.BigEndian.AppendUint16(nil, v)) }
