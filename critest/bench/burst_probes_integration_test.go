//go:build integration

package bench

import (
	"cmp"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shimd/shimd/critest/harness"
)

// debugSock is a daemon's debug socket (Go's /debug/pprof/).
type debugSock struct {
	daemon, path string
}

// shimdSideSocks are the debug sockets of shimd's side: shimd's (BENCH_SHIMD_DEBUG,
// when set) and its containerd's at containerdDebug.
func shimdSideSocks(containerdDebug string) []debugSock {
	socks := []debugSock{{"containerd", containerdDebug}}
	if d := os.Getenv("BENCH_SHIMD_DEBUG"); d != "" {
		socks = append([]debugSock{{"shimd", d}}, socks...)
	}
	return socks
}

// burstProbes are what BenchmarkBurst measures beside the wall and CPU times, when
// asked: BENCH_SYNCS=1 counts each daemon's fdatasync and fsync calls (one bbolt
// write transaction commits with an fdatasync) with `perf stat`; BENCH_PROFILE_DIR
// takes a CPU profile of each daemon with a debug socket over the first
// BENCH_PROFILE_SECONDS (default 15) of every burst start and teardown, and with BENCH_CONTENTION=1
// its block and mutex profiles over the same seconds (contentionFromEnv), and with
// BENCH_TRACE=1 shimd's execution trace (`go tool trace`; -pprof=sched gives where
// goroutines waited for a CPU), and with BENCH_ALLOCS=1 what each daemon allocated
// over those seconds, by allocation site (`go tool pprof -sample_index=alloc_space`):
// what its collector has to keep up with. BENCH_SCHED=1 records the scheduler's
// switches over the whole phase (`perf sched record -a`) and prints, for each daemon
// and for the benchmark's own process (the CRI client), how long its threads were
// runnable and waited for a CPU. BENCH_COMMS=1 samples every CPU's time over the whole
// phase (`perf record -a -e cpu-clock`, one sample per 0.5 ms of CPU) and prints the
// CPU per pod of each process name (runc, runc:[2:INIT], containerd-shim, the CNI
// plugins, pause, the daemons...), the kernel's part apart.
type burstProbes struct {
	syncs      bool
	profileDir string
	profileFor time.Duration
	contention bool
	trace      bool
	allocs     bool
	sched      bool
	comms      bool
}

func burstProbesFromEnv() burstProbes {
	return burstProbes{
		syncs:      os.Getenv("BENCH_SYNCS") == "1",
		profileDir: os.Getenv("BENCH_PROFILE_DIR"),
		profileFor: time.Duration(envInt("BENCH_PROFILE_SECONDS", 15)) * time.Second,
		contention: os.Getenv("BENCH_CONTENTION") == "1",
		trace:      os.Getenv("BENCH_TRACE") == "1",
		allocs:     os.Getenv("BENCH_ALLOCS") == "1",
		sched:      os.Getenv("BENCH_SCHED") == "1",
		comms:      os.Getenv("BENCH_COMMS") == "1",
	}
}

// start begins the probes of one phase of tg's burst; the returned function ends
// them and returns the lines to print.
func (p burstProbes) start(b *testing.B, tg *target, phase string, pods int) func() string {
	b.Helper()
	var stops []func() string
	names := daemonNames(tg)
	if p.syncs {
		for i, pid := range tg.daemons {
			stops = append(stops, countSyncs(b, fmt.Sprintf("%s, %s: %s", tg.name, phase, names[i]), pid, pods))
		}
	}
	if p.sched {
		stops = append(stops, recordSchedWaits(b, fmt.Sprintf("%s, %s", tg.name, phase),
			append(slices.Clone(tg.daemons), os.Getpid()), append(names, "the benchmark (CRI client)")))
	}
	if p.comms {
		keep := ""
		if p.profileDir != "" {
			keep = filepath.Join(p.profileDir, fmt.Sprintf("%s-%s.comms.data", tg.name, strings.ReplaceAll(phase, " ", "-")))
		}
		stops = append(stops, recordCommCPU(b, fmt.Sprintf("%s, %s", tg.name, phase), pods, keep))
	}
	if p.profileDir != "" {
		var wg sync.WaitGroup
		kinds := []string{"profile"}
		if p.contention {
			kinds = append(kinds, "block", "mutex")
		}
		if p.allocs {
			kinds = append(kinds, "allocs")
		}
		for _, s := range tg.debugSocks {
			kinds := kinds
			if p.trace && s.daemon == "shimd" {
				kinds = append(kinds[:len(kinds):len(kinds)], "trace")
			}
			for _, kind := range kinds {
				suffix := ".pprof"
				switch kind {
				case "profile":
				case "trace":
					suffix = ".trace"
				default:
					suffix = "." + kind + ".pprof"
				}
				name := filepath.Join(p.profileDir, fmt.Sprintf("%s-%s-%s%s", tg.name, strings.ReplaceAll(phase, " ", "-"), s.daemon, suffix))
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := takeProfile(s.path, kind, p.profileFor, name); err != nil {
						b.Logf("%s profile of %s: %v", kind, s.daemon, err)
					}
				}()
			}
		}
		stops = append(stops, func() string {
			wg.Wait()
			return ""
		})
	}
	return func() string {
		var out strings.Builder
		for _, stop := range stops {
			out.WriteString(stop())
		}
		return out.String()
	}
}

// daemonNames names tg's daemons in the order of tg.daemons.
func daemonNames(tg *target) []string {
	if len(tg.daemons) > 1 {
		return []string{"shimd", "shimd's containerd"}
	}
	return []string{tg.name + "'s containerd"}
}

// runPerf starts perf with args (setting names the setting that asked for it) and
// returns the function that stops it, by its own pid, with the SIGINT it ends on.
func runPerf(b *testing.B, setting string, args ...string) func() {
	b.Helper()
	cmd := exec.Command("perf", args...)
	if err := cmd.Start(); err != nil {
		b.Fatalf("%s needs perf: %v", setting, err)
	}
	time.Sleep(300 * time.Millisecond) // perf attaches
	return func() {
		_ = cmd.Process.Signal(syscall.SIGINT)
		if err := cmd.Wait(); err != nil && !strings.Contains(err.Error(), "signal: interrupt") {
			b.Logf("perf %s: %v", args[0], err)
		}
	}
}

// countSyncs runs `perf stat` on pid (its threads, those made later too) until the
// returned function, which stops perf and returns the counts.
func countSyncs(b *testing.B, who string, pid, pods int) func() string {
	b.Helper()
	out := filepath.Join(b.TempDir(), "perf.out")
	stop := runPerf(b, "BENCH_SYNCS=1", "stat", "-x,", "-o", out, "-e", strings.Join(syncEvents, ","), "-p", strconv.Itoa(pid))
	return func() string {
		stop()
		raw, err := os.ReadFile(out)
		if err != nil {
			b.Fatalf("perf stat: %v", err)
		}
		c, err := parseSyncCounts(string(raw))
		if err != nil {
			b.Fatalf("%v", err)
		}
		return c.line(who, pods) + "\n"
	}
}

// recordSchedWaits runs `perf sched record -a` until the returned function, which
// stops perf and returns, for each of pids (named by names), how long its threads
// waited for a CPU.
func recordSchedWaits(b *testing.B, phase string, pids []int, names []string) func() string {
	b.Helper()
	data := filepath.Join(b.TempDir(), "sched.data")
	stop := runPerf(b, "BENCH_SCHED=1", "sched", "record", "-a", "-o", data)
	return func() string {
		stop()
		defer os.Remove(data)
		out, err := exec.Command("perf", "sched", "timehist", "-i", data).Output()
		if err != nil {
			b.Fatalf("perf sched timehist: %v", err)
		}
		waits, err := parseSchedTimehist(string(out), pids)
		if err != nil {
			b.Fatalf("%v", err)
		}
		var lines strings.Builder
		for i, pid := range pids {
			lines.WriteString(waits[pid].line(fmt.Sprintf("%s: %s", phase, names[i])))
		}
		return lines.String()
	}
}

// commSamplePeriod is BENCH_COMMS's sampling period, in ns of CPU time.
const commSamplePeriod = 500 * time.Microsecond

// recordCommCPU runs `perf record -a` until the returned function, which stops perf
// and returns the phase's CPU per pod by process name. The samples are kept in keep
// when it is set (BENCH_PROFILE_DIR: `perf report -i FILE --sort comm,sym`).
func recordCommCPU(b *testing.B, phase string, pods int, keep string) func() string {
	b.Helper()
	data := cmp.Or(keep, filepath.Join(b.TempDir(), "comms.data"))
	mounts0 := countMounts(b)
	stop := runPerf(b, "BENCH_COMMS=1", "record", "-a", "-q", "-e", "cpu-clock", "-c", strconv.FormatInt(int64(commSamplePeriod), 10), "-o", data)
	return func() string {
		stop()
		if keep == "" {
			defer os.Remove(data)
		}
		out, err := exec.Command("perf", "script", "-i", data, "-F", "comm,pid,ip").Output()
		if err != nil {
			b.Fatalf("perf script: %v", err)
		}
		c, err := parseCommSamples(string(out), commSamplePeriod)
		if err != nil {
			b.Fatalf("%v", err)
		}
		mounts1 := countMounts(b)
		return c.lines(phase, pods) + fmt.Sprintf("%s: mounts in the host's table: %d before, %d after (%+.2f per pod)\n",
			phase, mounts0, mounts1, float64(mounts1-mounts0)/float64(pods))
	}
}

// countMounts is the number of mounts in the benchmark's (the host's) mount namespace;
// every runc init copies them all into the container's new one, and runc, its shim
// and containerd read the whole table more than once per container.
func countMounts(b *testing.B) int {
	b.Helper()
	raw, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		b.Fatalf("BENCH_COMMS=1: %v", err)
	}
	return strings.Count(string(raw), "\n")
}

// takeProfile writes the profile kind ("profile" for CPU, "block", "mutex", "trace") of the
// daemon behind the debug socket sock, over the next d (for block and mutex, the
// difference between two snapshots d apart), to file.
func takeProfile(sock, kind string, d time.Duration, file string) error {
	return fetchDebug(sock, fmt.Sprintf("/debug/pprof/%s?seconds=%d", kind, int(d.Seconds())), d+time.Minute, file)
}

// snapshotMemory writes, for each of tg's daemons (pids: shimd and its containerd, or
// containerd alone), where its memory is: the kernel's
// split of its RSS (/proc/PID/smaps_rollup: anonymous, file-backed) and, for each
// debug socket, the Go heap profile after a collection (in use by allocation site)
// and the runtime's memory statistics (heap?debug=1: heap in use and idle, stacks,
// what was returned to the kernel), and its goroutines counted by stack, to
// <tg.name>-<label>-<daemon>.{smaps,heap.pprof,heap.txt,goroutines.txt}.
func snapshotMemory(b *testing.B, tg *target, pids []int, dir, label string) {
	b.Helper()
	names := []string{"containerd"}
	if len(pids) > 1 {
		names = []string{"shimd", "containerd"}
	}
	base := func(daemon string) string { return filepath.Join(dir, fmt.Sprintf("%s-%s-%s", tg.name, label, daemon)) }
	for i, pid := range pids {
		if raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid)); err != nil {
			b.Logf("smaps of %s: %v", names[i], err)
		} else if err := os.WriteFile(base(names[i])+".smaps", raw, 0o644); err != nil {
			b.Fatalf("%v", err)
		}
	}
	for _, s := range tg.debugSocks {
		for file, path := range map[string]string{
			".heap.pprof":     "/debug/pprof/heap?gc=1",
			".heap.txt":       "/debug/pprof/heap?debug=1",
			".goroutines.txt": "/debug/pprof/goroutine?debug=1",
		} {
			if err := fetchDebug(s.path, path, time.Minute, base(s.daemon)+file); err != nil {
				b.Logf("%s of %s: %v", path, s.daemon, err)
			}
		}
	}
}

// fetchDebug writes what the daemon behind the debug socket sock answers at path,
// within timeout, to file.
func fetchDebug(sock, path string, timeout time.Duration, file string) error {
	resp, err := harness.UnixHTTPClient(sock, timeout).Get("http://d" + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s: %s: %s", path, resp.Status, strings.TrimSpace(string(msg)))
	}
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	return os.WriteFile(file, data, 0o644)
}
