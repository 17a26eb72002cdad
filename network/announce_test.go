package network

import (
	"encoding/binary"
	"encoding/hex"
	"net"
	"testing"

	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// The announcement is the ARP request the kernel's arp_notify sends: sender and
// target IP the pod's address, target MAC empty.
func TestARPAnnouncement(t *testing.T) {
	mac, _ := net.ParseMAC("0a:58:c6:12:00:05")
	got := arpAnnouncement(mac, net.ParseIP("198.18.0.5"))
	want := "0001" + "0800" + "06" + "04" + "0001" + "0a58c6120005" + "c6120005" + "000000000000" + "c6120005"
	require.Equal(t, want, hex.EncodeToString(got))
	inMemory := binary.NativeEndian.AppendUint16(nil, htons(0x0806))
	require.Equal(t, []byte{0x08, 0x06}, inMemory, "network byte order in memory")
}

// A result without an IPv4 address inside the sandbox has nothing to announce and
// never enters the namespace (which does not exist here).
func TestAnnounceNothing(t *testing.T) {
	host, pod := 0, 1
	_, v6, _ := net.ParseCIDR("fd00::5/64")
	_, v4, _ := net.ParseCIDR("198.18.0.5/24")
	res := &types100.Result{CNIVersion: "1.0.0",
		Interfaces: []*types100.Interface{{Name: "veth1"}, {Name: "eth0", Sandbox: "/run/netns/x"}},
		IPs: []*types100.IPConfig{
			{Interface: &pod, Address: *v6},  // IPv6: not announced
			{Interface: &host, Address: *v4}, // on the host side
			{Address: *v4},                   // on no interface
		}}
	require.NoError(t, announce("/nonexistent/netns", res))
}

// hardwareAddr asks the kernel by ioctl, which needs no privilege: the loopback
// device has no Ethernet address (nothing to announce from), a missing interface is
// an error, and a name longer than IFNAMSIZ allows is refused before the ioctl.
func TestHardwareAddr(t *testing.T) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	require.NoError(t, err)
	defer unix.Close(fd)

	mac, err := hardwareAddr(fd, "lo")
	require.NoError(t, err)
	require.Nil(t, mac, "lo is ARPHRD_LOOPBACK, not Ethernet")

	_, err = hardwareAddr(fd, "nosuchif0")
	require.ErrorIs(t, err, unix.ENODEV)

	_, err = hardwareAddr(fd, "a-name-of-16-chr")
	require.ErrorContains(t, err, "too long")
}
