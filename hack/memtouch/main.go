// Command memtouch measures what touching fresh memory costs on this machine: it
// maps GiB of anonymous memory, writes one byte per 4 KiB page, unmaps it, and
// prints the wall and system time of each round, pausing between rounds. On a
// guest whose hypervisor takes freed memory back (virtio-balloon free page
// reporting: /sys/module/page_reporting/parameters/reported_kib grows), a page
// freed a second ago costs the hypervisor's fault when touched again, charged to
// the guest as system time; benchmarks that fill the page cache (pulls, bursts)
// pay it too (docs/benchmarks.md, "Fresh memory on this machine").
//
//	go run ./hack/memtouch -gib 4 -rounds 5 -pause 10s
package main

import (
	"flag"
	"fmt"
	"os"
	"syscall"
	"time"
)

func main() {
	gib := flag.Int("gib", 4, "GiB touched per round")
	rounds := flag.Int("rounds", 5, "rounds")
	pause := flag.Duration("pause", 10*time.Second, "pause after each round")
	flag.Parse()
	for r := range *rounds {
		var u0, u1 syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &u0)
		t0 := time.Now()
		b, err := syscall.Mmap(-1, 0, *gib<<30, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
		if err != nil {
			fmt.Fprintln(os.Stderr, "memtouch:", err)
			os.Exit(1)
		}
		// 4 KiB pages, as the page cache uses them.
		_ = syscall.Madvise(b, syscall.MADV_NOHUGEPAGE)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		_ = syscall.Munmap(b)
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &u1)
		sys := time.Duration(u1.Stime.Nano() - u0.Stime.Nano())
		fmt.Printf("round %d: %d GiB touched in %.2fs wall, %.2fs system (%.2fs per GiB)\n",
			r, *gib, time.Since(t0).Seconds(), sys.Seconds(), sys.Seconds()/float64(*gib))
		if r < *rounds-1 {
			time.Sleep(*pause)
		}
	}
}
