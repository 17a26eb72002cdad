package bench

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat and of
// /proc/stat's CPU lines (100 on Linux).
const clockTicks = 100

// machineSnap is what the whole machine has done since boot: CPU time by kind and
// the whole disks' writes and discards. Differences of two tell what ran beside a
// measurement, the benchmark's own work included.
type machineSnap struct {
	at                          time.Time
	user, system, iowait, steal time.Duration
	written, discarded          int64 // bytes
	writeTime, discardTime      time.Duration
	// reported is the memory the guest has handed back to its hypervisor as free
	// (virtio-balloon free page reporting), bytes; -1 where the kernel does not say.
	reported int64
}

// busy is the CPU time of every kind but idle and iowait.
func (m machineSnap) busy() time.Duration { return m.user + m.system + m.steal }

func readMachine() (machineSnap, error) {
	stat, err := os.ReadFile("/proc/stat")
	if err != nil {
		return machineSnap{}, err
	}
	disks, err := os.ReadFile("/proc/diskstats")
	if err != nil {
		return machineSnap{}, err
	}
	m, err := parseMachineSnap(string(stat), string(disks), wholeDisk)
	m.at, m.reported = time.Now(), reportedFree()
	return m, err
}

// reportedFree is /sys/module/page_reporting/parameters/reported_kib in bytes, or -1.
// A page handed back costs a fault in the hypervisor when the guest touches it again,
// which the guest sees as system time of whoever touched it (hack/memtouch).
func reportedFree() int64 {
	raw, err := os.ReadFile("/sys/module/page_reporting/parameters/reported_kib")
	if err != nil {
		return -1
	}
	kib, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
	if err != nil {
		return -1
	}
	return kib << 10
}

// wholeDisk tells a disk (/sys/block/NAME) that is not a loop, RAM or device-mapper
// device: the loop devices' writes land in files on the real disks.
func wholeDisk(name string) bool {
	for _, p := range []string{"loop", "ram", "zram", "dm-", "md"} {
		if strings.HasPrefix(name, p) {
			return false
		}
	}
	_, err := os.Stat("/sys/block/" + name)
	return err == nil
}

// parseMachineSnap reads /proc/stat's "cpu" line (user nice system idle iowait irq
// softirq steal, USER_HZ) and the /proc/diskstats lines of the disks isDisk picks:
// sectors written (field 7 after the name) and ms writing (8), sectors discarded
// (14) and ms discarding (15); sectors are 512 bytes.
func parseMachineSnap(stat, diskstats string, isDisk func(string) bool) (machineSnap, error) {
	var m machineSnap
	line, _, _ := strings.Cut(stat, "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return m, fmt.Errorf("unexpected first line of /proc/stat: %q", line)
	}
	var v [8]int64
	for i := range v {
		n, err := strconv.ParseInt(f[i+1], 10, 64)
		if err != nil {
			return m, fmt.Errorf("/proc/stat field %d: %w", i+1, err)
		}
		v[i] = n
	}
	tick := func(n int64) time.Duration { return time.Duration(n) * time.Second / clockTicks }
	m.user, m.system, m.iowait, m.steal = tick(v[0]+v[1]), tick(v[2]+v[5]+v[6]), tick(v[4]), tick(v[7])
	for _, l := range strings.Split(diskstats, "\n") {
		f := strings.Fields(l)
		if len(f) < 18 || !isDisk(f[2]) {
			continue
		}
		var n [15]int64
		for i := range n {
			x, err := strconv.ParseInt(f[i+3], 10, 64)
			if err != nil {
				return m, fmt.Errorf("/proc/diskstats %s field %d: %w", f[2], i+1, err)
			}
			n[i] = x
		}
		m.written += n[6] * 512
		m.writeTime += time.Duration(n[7]) * time.Millisecond
		m.discarded += n[13] * 512
		m.discardTime += time.Duration(n[14]) * time.Millisecond
	}
	return m, nil
}

// since is what the machine did from b to m.
func (m machineSnap) since(b machineSnap) machineSnap {
	return machineSnap{at: b.at, user: m.user - b.user, system: m.system - b.system, iowait: m.iowait - b.iowait,
		steal: m.steal - b.steal, written: m.written - b.written, discarded: m.discarded - b.discarded,
		writeTime: m.writeTime - b.writeTime, discardTime: m.discardTime - b.discardTime,
		reported: m.reported - b.reported}
}

func (m machineSnap) String() string {
	s := fmt.Sprintf("CPU user %.1fs system %.1fs iowait %.1fs steal %.1fs; disks wrote %.0f MiB (%.1fs), discarded %.0f MiB (%.1fs)",
		m.user.Seconds(), m.system.Seconds(), m.iowait.Seconds(), m.steal.Seconds(),
		float64(m.written)/(1<<20), m.writeTime.Seconds(), float64(m.discarded)/(1<<20), m.discardTime.Seconds())
	if m.reported >= 0 {
		s += fmt.Sprintf("; memory handed back to the hypervisor %.0f MiB", float64(m.reported)/(1<<20))
	}
	return s
}
