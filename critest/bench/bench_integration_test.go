//go:build integration

// Run as root: make bench (see the package comment in stats.go).

package bench

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
	"github.com/shimd/shimd/sandbox/pause"
)

// rounds is the number of timed rounds per runtime (BENCH_ROUNDS, default 20).
var rounds = envInt("BENCH_ROUNDS", 20)

const (
	warmup     = 2 // untimed rounds per runtime before the timed ones
	rpcTimeout = 2 * time.Minute
	criNS      = "k8s.io" // containerd's CRI plugin namespace
	// benchLogLevel of shimd and of every containerd in a benchmark: what a node
	// runs in production (the tests' "debug" logs every RPC).
	benchLogLevel = "info"
)

// ops are the timed RPCs, in the order of one pod's lifecycle.
var ops = []string{"RunPodSandbox", "StopPodSandbox", "RemovePodSandbox"}

func TestMain(m *testing.M) {
	testFSFromHost()
	harness.Main(m)
}

// testFSFromHost puts every base directory of the benchmarks (the runtimes'
// containerd roots and state, shimd's state, image content and snapshots, the
// registry's store) on a journaled ext4 of its own when /tmp is an ext4 without a
// journal and SHIMD_TEST_FS is not set: there, making files costs kernel time that
// depends on how many were deleted in the minutes before (harness.TestFSEnv), and the
// two sides' figures would measure the benchmark's own history.
func testFSFromHost() {
	if fs := os.Getenv(harness.TestFSEnv); fs != "" {
		fmt.Printf("benchmark: base directories on %s=%s\n", harness.TestFSEnv, fs)
		return
	}
	bare, err := harness.JournallessExt4("/tmp")
	switch {
	case err != nil:
		fmt.Printf("benchmark: the filesystem of /tmp: %v; base directories stay there\n", err)
	case bare:
		fmt.Printf("benchmark: /tmp is an ext4 without a journal: each base directory gets a journaled ext4 of its own (%s=ext4; %s=host keeps /tmp)\n",
			harness.TestFSEnv, harness.TestFSEnv)
		os.Setenv(harness.TestFSEnv, "ext4")
	}
}

// shimdExtraConfig is the config a benchmark's shimd gets beyond the harness's: the
// registry mirrors, and with BENCH_SHIMD_DEBUG=<absolute socket path> the debug endpoint,
// so that a CPU profile can be taken while the benchmark runs:
//
//	curl --unix-socket $BENCH_SHIMD_DEBUG -o cpu.pprof 'http://x/debug/pprof/profile?seconds=60'
//
// With BENCH_CONTENTION=1 shimd also samples blocking and mutex contention (see
// contentionFromEnv).
func shimdExtraConfig(hosts string) string {
	return fmt.Sprintf("[registry]\nconfig_path = %q\n", hosts) + shimdDebugConfig()
}

// shimdDebugConfig is the [metrics] table of BENCH_SHIMD_METRICS (an absolute socket
// path) and the [debug] table of BENCH_SHIMD_DEBUG and BENCH_CONTENTION, or nothing;
// it goes last in a config.
func shimdDebugConfig() string {
	c := ""
	if m := os.Getenv("BENCH_SHIMD_METRICS"); m != "" {
		// shimd's own view of each call (shimd_rpc_duration_seconds), to set beside
		// the client's: curl --unix-socket $BENCH_SHIMD_METRICS http://x/metrics
		c += fmt.Sprintf("[metrics]\naddress = %q\n", m)
	}
	d := os.Getenv("BENCH_SHIMD_DEBUG")
	if d == "" {
		return c
	}
	c += fmt.Sprintf("[debug]\naddress = %q\n", d)
	if os.Getenv("BENCH_CONTENTION") == "1" {
		c += fmt.Sprintf("block_profile_rate = %d\nmutex_profile_fraction = %d\n", contentionBlockRate, contentionMutexFraction)
	}
	return c
}

// The sampling of the contention profiles (BENCH_CONTENTION=1), the same in shimd and
// containerd: one block sample per 10 µs spent blocked on average, one contended
// mutex event in 5.
const (
	contentionBlockRate     = 10000
	contentionMutexFraction = 5
)

// contentionFromEnv prepares BENCH_CONTENTION=1: the block and mutex profiles of both
// daemons beside their CPU profiles. containerd's own binary never turns the sampling
// on, so the pair's containerd is bin/containerd-profiled (hack/tools.sh
// containerd-profiled: containerd's main with the two runtime calls), told the rates by
// its environment. It needs BENCH_SHIMD_DEBUG, and BENCH_PROFILE_DIR or POLL_PROFILE_DIR.
func contentionFromEnv(b testing.TB) {
	if os.Getenv("BENCH_CONTENTION") != "1" {
		return
	}
	if os.Getenv("BENCH_PROFILE_DIR")+os.Getenv("POLL_PROFILE_DIR") == "" || os.Getenv("BENCH_SHIMD_DEBUG") == "" {
		b.Fatal("BENCH_CONTENTION=1 needs BENCH_SHIMD_DEBUG and BENCH_PROFILE_DIR (bursts) or POLL_PROFILE_DIR (polling)")
	}
	b.Setenv("SHIMD_CONTAINERD", "profiled")
	b.Setenv("CONTAINERD_BLOCK_PROFILE_RATE", strconv.Itoa(contentionBlockRate))
	b.Setenv("CONTAINERD_MUTEX_PROFILE_FRACTION", strconv.Itoa(contentionMutexFraction))
}

// pauseMode is shimd's sandbox.pause in the benchmarks: BENCH_PAUSE, else the
// harness's SHIMD_PAUSE, else shimd's default ("when-needed": the benchmarks' pods,
// like the kubelet's, need no pause). BENCH_PAUSE=always gives every shimd pod a
// pause container; containerd's CRI plugin always runs one.
func pauseMode() string {
	for _, v := range []string{os.Getenv("BENCH_PAUSE"), harness.PauseMode()} {
		if v != "" {
			return v
		}
	}
	return "when-needed"
}

// target is one CRI runtime under test and the latencies measured on it.
type target struct {
	name    string // "shimd" or "containerd"; also the metric prefix
	handler string // runtime handler of the pods ("" = default, runc)
	rt      runtimeapi.RuntimeServiceClient
	is      runtimeapi.ImageServiceClient
	samples map[string][]time.Duration // by op
	// cgroupRoot ("shimd-..."): give each pod a cgroup parent of its own below it, as
	// the kubelet's cgroupfs driver does (/kubepods/besteffort/pod<uid>); "": none.
	cgroupRoot string
	// daemons are the pids of the processes that serve this target's CRI calls
	// (shimd and containerd; containerd alone for its CRI plugin); nil: unknown.
	daemons []int
	// debugSocks are the debug sockets of the daemons that have one (burstProbes).
	debugSocks []debugSock
	// cpu is BENCH_CPU_CGROUP's group (nil: none), sampled with the machine.
	cpu *cpuTree
	// logDir ("": none) gives each pod a log directory below it and its container a
	// CRI log there, as the kubelet does (<pod dir>/<container>/0.log).
	logDir string
}

// pair is one containerd with its own CRI plugin and a shimd on it, sharing the CNI
// network and the offline registry (hosts.toml mirrors for both).
type pair struct {
	env           *harness.Env
	shimd, cd     *target
	shimdIS, cdIS runtimeapi.ImageServiceClient
	shimdNS       string // shimd's containerd namespace
	shimdEndpoint string // shimd's CRI endpoint, unix://...
	shimdLog      string // shimd's log file
}

// newPair starts the pair. Both run on the same containerd (namespaces "shimd" and
// "k8s.io"), the same runc and the same CNI network (bridge + host-local + portmap),
// from the same pause image bytes.
func newPair(b testing.TB) *pair { return newPairOn(b, "") }

// newPairOn is newPair whose pods run on the runtime handler given: with
// harness.RunscHandler both also get the runsc handler (the same runsc and options).
func newPairOn(b testing.TB, handler string) *pair {
	if os.Geteuid() != 0 {
		b.Skip("the benchmark needs root")
	}
	runsc := handler == harness.RunscHandler
	if runsc {
		harness.SkipWithoutRunsc(b)
	}
	contentionFromEnv(b)
	hosts := registryHosts(b)
	env, criRT, cdIS := startCRIOn(b, hosts, runsc)
	// shimd in the same base dir: same containerd, same CNI conf dir (hence
	// the same bridge and IPAM data dir), its own runc root.
	// A namespace of its own, so that its /<namespace> cgroup parents go with it.
	ns := fmt.Sprintf("shimd-bench%d", os.Getpid())
	b.Cleanup(func() { harness.RemoveEmptyCgroups(ns) })
	shimd := harness.StartShimd(b, harness.ShimdOptions{
		Namespace:         ns,
		ContainerdAddress: env.Containerd.Address(),
		Dir:               env.Base,
		RuncRoot:          filepath.Join(env.Base, "runc"),
		ExtraConfig:       shimdExtraConfig(hosts),
		Runsc:             runsc,
		Pause:             pauseMode(),
		LogLevel:          benchLogLevel,
	})
	// Registered after StartShimd, so it runs while shimd is still up.
	b.Cleanup(func() {
		harness.AssertNoLeaks(b, harness.LeakCheck{
			Containerd: env.Containerd, Namespace: ns, Shimd: shimd, CNI: env.CNI,
			MountRoots: []string{env.Base},
		})
	})

	p := &pair{
		env:     env,
		shimd:   &target{name: "shimd", handler: handler, rt: shimd.Runtime(b), samples: map[string][]time.Duration{}},
		cd:      &target{name: "containerd", handler: handler, rt: criRT, samples: map[string][]time.Duration{}},
		shimdIS: shimd.Images(b),
		cdIS:    cdIS,
		shimdNS: shimd.Namespace(),
		// For a kubelet (BenchmarkKubeletObserved).
		shimdEndpoint: shimd.Endpoint(),
		shimdLog:      shimd.LogPath(),
	}
	p.shimd.is, p.cd.is = p.shimdIS, p.cdIS
	p.shimd.daemons = []int{shimd.PID(), env.Containerd.PID()}
	p.cd.daemons = []int{env.Containerd.PID()}
	p.cd.debugSocks = []debugSock{{"containerd", env.Containerd.DebugAddress()}}
	p.shimd.debugSocks = shimdSideSocks(env.Containerd.DebugAddress())
	b.Cleanup(func() {
		for _, tg := range []*target{p.shimd, p.cd} {
			ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
			resp, err := tg.rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
			cancel()
			require.NoError(b, err)
			require.Empty(b, resp.Items, "%s still lists pods", tg.name)
		}
	})
	return p
}

// BenchmarkPodLifecycle times RunPodSandbox, StopPodSandbox and RemovePodSandbox
// through shimd and through containerd's own CRI plugin. Rounds are interleaved
// (shimd round i, then containerd round i) so background noise hits both alike. The
// benchmark ignores b.N: one run does the fixed number of rounds (use -benchtime 1x).
func BenchmarkPodLifecycle(b *testing.B) {
	p := newPair(b)
	targets := []*target{p.shimd, p.cd}
	for round := -warmup; round < rounds; round++ {
		for _, tg := range targets {
			tg.lifecycle(b, round, p.env.CNI.Subnet)
		}
	}
	report(b, fmt.Sprintf("pod sandbox lifecycle: %d rounds per runtime after %d warm-up rounds, interleaved", rounds, warmup),
		ops, p.shimd, p.cd)
}

// registryHosts starts the offline registry and returns a hosts.toml directory
// that mirrors every registry to it.
func registryHosts(b testing.TB) string {
	reg := harness.StartRegistry(b, harness.RegistryOptions{})
	hosts := b.TempDir()
	reg.WriteHermeticHostsDir(b, hosts)
	return hosts
}

// startCRIOn starts a containerd with its CRI plugin (with the runsc handler if
// runsc), the CNI network in <base>/net.d (the CRI plugin's conf dir) and a leak
// check of namespace k8s.io, makes it find the sandbox image, and waits until it is
// ready.
func startCRIOn(b testing.TB, hosts string, runsc bool) (*harness.Env, runtimeapi.RuntimeServiceClient, runtimeapi.ImageServiceClient) {
	return startCRIWith(b, hosts, harness.ContainerdOptions{Runsc: runsc})
}

// startCRIWith is startCRIOn with more of the containerd's options (the CRI plugin, the
// registry hosts and the log level are set here).
func startCRIWith(b testing.TB, hosts string, opts harness.ContainerdOptions) (*harness.Env, runtimeapi.RuntimeServiceClient, runtimeapi.ImageServiceClient) {
	opts.WithCRI, opts.RegistryConfigPath, opts.LogLevel = true, hosts, benchLogLevel
	env := harness.New(b, harness.Options{NoShimd: true, Containerd: opts})
	conn, err := grpc.NewClient("unix://"+env.Containerd.Address(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(b, err)
	b.Cleanup(func() { conn.Close() })
	cdIS := runtimeapi.NewImageServiceClient(conn)
	importSandboxImage(b, env, cdIS)
	criRT := runtimeapi.NewRuntimeServiceClient(conn)
	waitCRIReady(b, criRT)
	return env, criRT, cdIS
}

// importSandboxImage makes containerd's CRI find its sandbox image locally
// (there is no registry): it imports shimd's built-in pause image into
// namespace k8s.io and names it harness.DefaultSandboxImage, labelled as
// CRI's own PullImage would, then waits until CRI's ImageStatus sees it.
func importSandboxImage(b testing.TB, env *harness.Env, is runtimeapi.ImageServiceClient) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()
	nsCtx := namespaces.WithNamespace(ctx, criNS)
	cl := env.Containerd.Client(b)
	img, err := pause.Ensure(nsCtx, cl, "overlayfs")
	require.NoError(b, err)
	_, err = cl.ImageService().Create(nsCtx, images.Image{
		Name:   harness.DefaultSandboxImage,
		Target: img.Target(),
		Labels: map[string]string{"io.cri-containerd.image": "managed", "io.cri-containerd.pinned": "pinned"},
	})
	require.NoError(b, err)

	// The CRI plugin learns of the record from an event: poll.
	want := pause.Build().Config.Desc.Digest.String() // CRI's image id
	require.Eventually(b, func() bool {
		resp, err := is.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: harness.DefaultSandboxImage}})
		return err == nil && resp.Image != nil && resp.Image.Id == want
	}, 30*time.Second, 100*time.Millisecond, "CRI ImageStatus does not see %s as %s", harness.DefaultSandboxImage, want)
}

// waitCRIReady waits until containerd's CRI reports RuntimeReady and
// NetworkReady (it loads the CNI conf asynchronously).
func waitCRIReady(b testing.TB, rt runtimeapi.RuntimeServiceClient) {
	b.Helper()
	require.Eventually(b, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, err := rt.Status(ctx, &runtimeapi.StatusRequest{})
		if err != nil {
			return false
		}
		ready := 0
		for _, c := range st.Status.Conditions {
			if (c.Type == runtimeapi.RuntimeReady || c.Type == runtimeapi.NetworkReady) && c.Status {
				ready++
			}
		}
		return ready == 2
	}, 30*time.Second, 200*time.Millisecond, "containerd CRI runtime and network not ready")
}

// lifecycle runs, stops and removes one pod, timing each RPC. Negative
// rounds are warm-up: not recorded, but they check the pod got a CNI address.
func (tg *target) lifecycle(b *testing.B, round int, subnet *net.IPNet) {
	b.Helper()
	name := fmt.Sprintf("bench-%s-%d", tg.name, round+warmup)
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{
			Name: name, Namespace: "bench", Uid: fmt.Sprintf("%s-%d-%d", name, os.Getpid(), time.Now().UnixNano()),
		},
		Hostname:  name,
		DnsConfig: &runtimeapi.DNSConfig{Servers: []string{"198.18.255.53"}},
		Linux:     &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{}},
	}
	var id string
	tg.timed(b, round, "RunPodSandbox", func(ctx context.Context) error {
		resp, err := tg.rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
		id = resp.GetPodSandboxId()
		return err
	})
	if round < 0 {
		ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
		st, err := tg.rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
		cancel()
		require.NoError(b, err)
		ip := net.ParseIP(st.GetStatus().GetNetwork().GetIp())
		require.True(b, ip != nil && subnet.Contains(ip), "%s pod %s: IP %v not in %s", tg.name, id, ip, subnet)
	}
	tg.timed(b, round, "StopPodSandbox", func(ctx context.Context) error {
		_, err := tg.rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id})
		return err
	})
	tg.timed(b, round, "RemovePodSandbox", func(ctx context.Context) error {
		_, err := tg.rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id})
		return err
	})
}

// timed runs one RPC and, unless round is a warm-up, records how long it took.
func (tg *target) timed(b *testing.B, round int, op string, call func(context.Context) error) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()
	start := time.Now()
	err := call(ctx)
	took := time.Since(start)
	require.NoError(b, err, "%s %s, round %d", tg.name, op, round)
	if round >= 0 {
		tg.samples[op] = append(tg.samples[op], took)
	}
}

// report prints a table to stdout (shown by go test -bench without -v) and reports
// the p50s and their ratios as benchmark metrics.
func report(b *testing.B, title string, ops []string, shimd, cd *target) {
	var out strings.Builder
	fmt.Fprintf(&out, "\n%s (shimd: sandbox.pause = %s; a percentile with too few samples to differ from the largest is given as \"max of N\")\n", title, pauseMode())
	fmt.Fprintf(&out, "%-22s %20s %20s %20s %20s  %s\n",
		"operation", "shimd p50", "shimd p90", "containerd p50", "containerd p90", "ratio p50 (shimd/containerd)")
	b.ReportMetric(0, "ns/op") // the whole run's time per op means nothing here
	for _, op := range ops {
		s50, c50 := percentile(shimd.samples[op], 50), percentile(cd.samples[op], 50)
		ratio := ms(s50) / ms(c50)
		fmt.Fprintf(&out, "%-22s %20s %20s %20s %20s  %.2fx\n", op,
			pctCell(shimd.samples[op], 50), pctCell(shimd.samples[op], 90),
			pctCell(cd.samples[op], 50), pctCell(cd.samples[op], 90), ratio)
		// A metric unit has no spaces: "burst start (wall)" -> "burst-start-wall".
		short := strings.Join(strings.FieldsFunc(strings.ToLower(op), func(r rune) bool {
			return !('a' <= r && r <= 'z' || '0' <= r && r <= '9')
		}), "-")
		b.ReportMetric(ms(s50), shimd.name+"-"+short+"-p50-ms")
		b.ReportMetric(ms(c50), cd.name+"-"+short+"-p50-ms")
		b.ReportMetric(ratio, short+"-ratio")
	}
	fmt.Fprint(os.Stdout, out.String())
}
