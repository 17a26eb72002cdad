// Command icmpecho pings 127.0.0.1 once through an ICMP echo socket (SOCK_DGRAM,
// IPPROTO_ICMP), the kind an unprivileged user may open when its group is in
// net.ipv4.ping_group_range, and prints "ping=yes", or "ping=no" and the error.
// The e2e tests run it in containers (TestUnprivilegedPortsAndPing). It uses
// package syscall only, so the binary is static and runs in any image.
package main

import (
	"fmt"
	"os"
	"syscall"
)

func main() {
	if err := echo(); err != nil {
		fmt.Printf("ping=no\n%v\n", err)
		os.Exit(1)
	}
	fmt.Println("ping=yes")
}

func echo() error {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_DGRAM, syscall.IPPROTO_ICMP)
	if err != nil {
		return fmt.Errorf("socket: %w", err)
	}
	defer syscall.Close(fd)
	tv := syscall.Timeval{Sec: 2}
	if err := syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv); err != nil {
		return fmt.Errorf("timeout: %w", err)
	}
	// Type 8 (echo request), code 0; the kernel fills in the id and the checksum.
	req := []byte{8, 0, 0, 0, 0, 0, 0, 1, 'p', 'i', 'n', 'g'}
	to := &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}
	if err := syscall.Sendto(fd, req, 0, to); err != nil {
		return fmt.Errorf("send: %w", err)
	}
	buf := make([]byte, 64)
	n, _, err := syscall.Recvfrom(fd, buf, 0)
	if err != nil {
		return fmt.Errorf("receive: %w", err)
	}
	if n < 8 || buf[0] != 0 {
		return fmt.Errorf("not an echo reply: % x", buf[:n])
	}
	return nil
}
