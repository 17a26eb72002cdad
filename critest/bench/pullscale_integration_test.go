//go:build integration

package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
)

// slowHost is the registry name behind the slow link: it resolves through the
// hosts.toml directory only (.invalid never resolves in DNS).
const slowHost = "slow.registry.invalid"

// pullStallTimeout is both runtimes' no-progress timeout in BenchmarkPullScale.
const pullStallTimeout = "60s"

// pullCase is one row group of BenchmarkPullScale: images pulled at once, cold.
type pullCase struct {
	name   string
	images []string
	rounds int
}

// pullSample is one cold pull of a case on one side.
type pullSample struct {
	wall      time.Duration
	disk      int64 // growth of the side's containerd root
	daemonCPU time.Duration
	// after is whose pull came just before this one: "own" (the same side's, as
	// on a node, where the runtime's last pull was its own), "other" (the other
	// side's), or "" for the first pull of the benchmark.
	after string
}

// BenchmarkPullScale pulls as a node does when big pods land: a large image of real
// files (about 2.2 GB unpacked, 8 layers on Debian 12; pullset.go), five different
// images at once (a kubelet with maxParallelImagePulls: 5), the five again through a
// slow link (PULL_SLOW_MIBS MiB/s, default 25, shared by all connections), and a pull
// whose blob stalls, which each runtime's no-progress timeout (60 s for both) must
// end. shimd and containerd's CRI each have a containerd of their own, so every pull
// is cold: after each, the images are removed and the benchmark waits until the
// containerd holds none of their blobs. PULL_ROUNDS (default 3) rounds of the first
// two cases, PULL_SLOW_ROUNDS (default 1) of the slow one, the sides taking turns
// going first. Per pull: wall time, the growth of the containerd root (content store,
// snapshots, metadata) after it, the daemons' CPU, and a line of what the whole
// machine did meanwhile (user and system CPU, disk writes and discards).
// PULL_STALL_ONLY=1 runs the stall alone, PULL_STALL=0 all but it; PULL_CASES picks
// cases by index (0 the large image, 1 five at once, 2 the slow link).
func BenchmarkPullScale(b *testing.B) {
	cache := cmp.Or(os.Getenv("PULL_CACHE"), "/var/cache/shimd/bench-pull")
	reg := harness.StartRegistry(b, harness.RegistryOptions{Writable: true})
	t0 := time.Now()
	large := largePullImage()
	specs := append([]pullImageSpec{large}, pullSetImages()...)
	// The layers first, as many at once as there are CPUs (cached after the first run).
	var built sync.WaitGroup
	sem := make(chan struct{}, runtime.NumCPU())
	buildErrs := make([]error, 0)
	var buildMu sync.Mutex
	for _, s := range specs {
		for _, l := range s.Layers {
			built.Add(1)
			go func() {
				defer built.Done()
				sem <- struct{}{}
				defer func() { <-sem }()
				if _, err := buildPullLayer(cache, l); err != nil {
					buildMu.Lock()
					buildErrs = append(buildErrs, err)
					buildMu.Unlock()
				}
			}()
		}
	}
	built.Wait()
	require.NoError(b, errors.Join(buildErrs...))
	layers := map[string][]pullLayer{}
	for _, s := range specs {
		ls, err := pushPullImage(reg.URL(), cache, s)
		require.NoError(b, err, "push %s", s.name())
		layers[s.name()] = ls
	}
	fmt.Printf("pull images built (cache %s) and pushed in %.1fs:\n", cache, time.Since(t0).Seconds())
	for _, s := range specs {
		var c, u int64
		files := 0
		for _, l := range layers[s.name()] {
			c, u, files = c+l.Size, u+l.Unpacked, files+l.Files
		}
		fmt.Printf("  %-34s %d layers, %5.0f MiB compressed, %5.0f MiB unpacked, %d files\n", s.name(), len(layers[s.name()]), mib(c), mib(u), files)
	}

	link := newSlowLink(mustURL(b, reg.URL()), float64(envInt("PULL_SLOW_MIBS", 25))*(1<<20))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(b, err)
	srv := &http.Server{Handler: link}
	go srv.Serve(lis)
	b.Cleanup(func() { srv.Close() })
	hosts := b.TempDir()
	reg.WriteHermeticHostsDir(b, hosts)
	writeHostsFile(b, hosts, slowHost, "http://"+lis.Addr().String())

	shimdConfig := fmt.Sprintf("[registry]\nconfig_path = %q\npull_progress_timeout = %q\n", hosts, pullStallTimeout)
	if n := os.Getenv("PULL_UNPACK_LAYERS"); n != "" {
		// shimd's registry.unpack_layers (its default 0: one per CPU, 3 to 6; 1: one
		// by one, each onto its parent).
		shimdConfig += fmt.Sprintf("unpack_layers = %d\n", envInt("PULL_UNPACK_LAYERS", 0))
	}
	shimdConfig += shimdDebugConfig()
	sides := newCostSidesWith(b, hosts, shimdConfig, criSide{name: "containerd", opts: harness.ContainerdOptions{CRIImagePullProgressTimeout: pullStallTimeout}})

	rounds := envInt("PULL_ROUNDS", 3)
	var set, slowSet []string
	for _, s := range specs[1:] {
		set, slowSet = append(set, s.name()), append(slowSet, strings.Replace(s.name(), "docker.io/", slowHost+"/", 1))
	}
	cases := []pullCase{
		{fmt.Sprintf("large image (%d layers)", len(large.Layers)), []string{large.name()}, rounds},
		{"5 images at once", set, rounds},
		{fmt.Sprintf("5 images at once, %d MiB/s link", envInt("PULL_SLOW_MIBS", 25)), slowSet, envInt("PULL_SLOW_ROUNDS", 1)},
	}
	if os.Getenv("PULL_STALL_ONLY") == "1" {
		cases = nil
	}
	cases = pickCases(b, cases, os.Getenv("PULL_CASES"))
	// PULL_PROFILE_DIR: a CPU profile of each daemon with a debug socket (shimd's
	// with BENCH_SHIMD_DEBUG) over the first PULL_PROFILE_SECONDS (default 8) of
	// every pull, <side>-case<i>-round<r>-<daemon>.pprof (i counts the cases run).
	probes := burstProbes{profileDir: os.Getenv("PULL_PROFILE_DIR"), profileFor: time.Duration(envInt("PULL_PROFILE_SECONDS", 8)) * time.Second}
	res := map[string]map[*costSide][]pullSample{}
	for i, c := range cases {
		res[c.name] = map[*costSide][]pullSample{}
		for round := range c.rounds {
			for _, s := range turns(sides, i+round) {
				profiled := probes.start(b, s.target, fmt.Sprintf("case%d-round%d", i, round), 0)
				res[c.name][s] = append(res[c.name][s], s.coldPull(b, c.images, allLayers(layers, c.images)))
				profiled()
			}
		}
	}
	if len(cases) > 0 {
		reportPulls(b, cases, sides, res)
	}

	if os.Getenv("PULL_STALL") == "0" {
		b.ReportMetric(0, "ns/op")
		return
	}
	// The stall: the first layer of an image stalls after 1 MiB, on every fetch.
	stalled := specs[1]
	link.stallBlob(layers[stalled.name()][0].Digest, 1<<20)
	ref := strings.Replace(stalled.name(), "docker.io/", slowHost+"/", 1)
	out := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(out, "\na blob that stalls after 1 MiB (%s), no-progress timeout %s on both:\n", ref, pullStallTimeout)
	for _, s := range sides {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		t0 := time.Now()
		_, err := s.is.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
		took := time.Since(t0)
		cancel()
		require.Error(b, err, "%s: the stalled pull succeeded", s.name)
		ingest := leftIngests(s.root)
		fmt.Fprintf(out, "  %s\tfailed after %.1fs\t%s\tingests left: %d\t%s\n", s.name, took.Seconds(), status.Code(err), ingest, firstLine(status.Convert(err).Message(), 140))
	}
	require.NoError(b, out.Flush())
	b.ReportMetric(0, "ns/op")
}

// pickCases keeps the cases whose indexes PULL_CASES lists ("1" or "0,2"); all when
// it is empty.
func pickCases(b *testing.B, cases []pullCase, list string) []pullCase {
	if list == "" {
		return cases
	}
	var kept []pullCase
	for _, f := range strings.Split(list, ",") {
		i, err := strconv.Atoi(strings.TrimSpace(f))
		require.NoError(b, err, "PULL_CASES")
		require.True(b, i >= 0 && i < len(cases), "PULL_CASES: no case %d", i)
		kept = append(kept, cases[i])
	}
	return kept
}

// coldPull pulls images at once on the side, measures, then removes them and waits
// until the containerd holds none of the layers' blobs.
func (s *costSide) coldPull(b *testing.B, images []string, layers []pullLayer) pullSample {
	snapshots := filepath.Join(s.root, "io.containerd.snapshotter.v1.overlayfs", "snapshots")
	require.DirExists(b, snapshots)
	snaps0 := countEntries(snapshots)
	before, disk0 := s.usage(b), diskUsage(s.root)
	m0, err := readMachine()
	require.NoError(b, err)
	t0 := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, len(images))
	for i, img := range images {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
			defer cancel()
			_, errs[i] = s.is.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: img}})
		}()
	}
	wg.Wait()
	sample := pullSample{wall: time.Since(t0)}
	require.NoError(b, errors.Join(errs...), s.name)
	sample.daemonCPU = s.usage(b).cpu - before.cpu
	sample.disk = diskUsage(s.root) - disk0
	// What the machine did during the pull, and between the previous pull's end
	// (its clean-up and sync included) and this one's start.
	m1, err := readMachine()
	require.NoError(b, err)
	fmt.Printf("  %s, %d image(s): wall %.2fs, daemons' CPU %.2fs; the machine during it: %s", s.name, len(images),
		sample.wall.Seconds(), sample.daemonCPU.Seconds(), m1.since(m0))
	if !lastPullEnd.at.IsZero() {
		fmt.Printf("; in the %.1fs before it: %s", m0.at.Sub(lastPullEnd.at).Seconds(), m0.since(lastPullEnd))
	}
	fmt.Println()
	lastPullEnd = m1
	switch lastPullSide {
	case "":
	case s.name:
		sample.after = "own"
	default:
		sample.after = "other"
	}
	lastPullSide = s.name
	for _, img := range images {
		ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
		_, err := s.is.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: img}})
		cancel()
		require.NoError(b, err, "%s: remove %s", s.name, img)
	}
	blobs := filepath.Join(s.root, "io.containerd.content.v1.content", "blobs", "sha256")
	require.Eventually(b, func() bool {
		for _, l := range layers {
			if _, err := os.Stat(filepath.Join(blobs, strings.TrimPrefix(l.Digest, "sha256:"))); err == nil {
				return false
			}
		}
		return true
	}, 2*time.Minute, 200*time.Millisecond, "%s: the removed images' blobs stay in the content store", s.name)
	// Cold means no layer snapshot either: an unpacker that finds a layer's
	// snapshot skips its download (both runtimes' do), and containerd's garbage
	// collector removes snapshots after the images, not with them.
	require.Eventually(b, func() bool { return countEntries(snapshots) <= snaps0 },
		2*time.Minute, 200*time.Millisecond, "%s: the removed images' snapshots stay", s.name)
	// Each pull writes GiBs: the next one starts once they are on disk, not
	// while the kernel still writes them back.
	unix.Sync()
	return sample
}

// lastPullEnd is the machine at the end of the last cold pull (coldPull), and
// lastPullSide the side that pulled.
var (
	lastPullEnd  machineSnap
	lastPullSide string
)

// countEntries is the number of entries in dir (0 if it cannot be read).
func countEntries(dir string) int {
	es, _ := os.ReadDir(dir)
	return len(es)
}

// reportPulls prints each case: p50 and each round of both sides, and the ratios.
func reportPulls(b *testing.B, cases []pullCase, sides []*costSide, res map[string]map[*costSide][]pullSample) {
	sh, cd := sides[0], sides[1]
	fmt.Printf("\ncold pulls, shimd and containerd's CRI each on its own containerd, taking turns going first (shimd: sandbox.pause = %s; pulls do not depend on it)\n", pauseMode())
	out := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(out, "case\tmeasure\tshimd\tcontainerd CRI\tratio (p50)\n")
	for _, c := range cases {
		for _, m := range []struct {
			name string
			v    func(pullSample) time.Duration
			f    func(time.Duration) string
		}{
			{"wall", func(p pullSample) time.Duration { return p.wall }, func(d time.Duration) string { return fmt.Sprintf("%.2fs", d.Seconds()) }},
			{"disk after the pull", func(p pullSample) time.Duration { return time.Duration(p.disk) }, func(d time.Duration) string { return fmt.Sprintf("%.0f MiB", mib(int64(d))) }},
			{"daemons' CPU", func(p pullSample) time.Duration { return p.daemonCPU }, func(d time.Duration) string { return fmt.Sprintf("%.2fs", d.Seconds()) }},
		} {
			// All pulls, then split by whose pull came before: where the filesystem
			// makes files slower after many deletes, a pull after the other side's
			// costs more than one after its own (docs/benchmarks.md, "The
			// journal-less root filesystem").
			for _, after := range []string{"all", "own", "other"} {
				if after != "all" && m.name == "disk after the pull" {
					continue
				}
				values := func(side *costSide) []time.Duration {
					var vs []time.Duration
					for _, p := range res[c.name][side] {
						if after == "all" || p.after == after {
							vs = append(vs, m.v(p))
						}
					}
					return vs
				}
				sv, cv := values(sh), values(cd)
				if len(sv) == 0 || len(cv) == 0 {
					continue
				}
				name := m.name
				if after != "all" {
					name += ", after the " + map[string]string{"own": "side's own pull", "other": "other side's pull"}[after]
				}
				s50, c50 := percentile(sv, 50), percentile(cv, 50)
				fmt.Fprintf(out, "%s\t%s\t%s (p50 of %d: %s)\t%s (p50 of %d: %s)\t%.2fx\n", c.name, name,
					m.f(s50), len(sv), joinDur(sv, m.f), m.f(c50), len(cv), joinDur(cv, m.f), float64(s50)/float64(c50))
				short := strings.NewReplacer(" ", "-", ",", "", "/", "-", "(", "", ")", "", "'", "").Replace(c.name + "-" + m.name)
				if after != "all" {
					short += "-after-" + after
				}
				b.ReportMetric(float64(s50)/float64(c50), short+"-ratio")
			}
		}
	}
	require.NoError(b, out.Flush())
}

func joinDur(ds []time.Duration, f func(time.Duration) string) string {
	var parts []string
	for _, d := range ds {
		parts = append(parts, f(d))
	}
	return strings.Join(parts, ", ")
}

// allLayers is the layers of the images named.
func allLayers(layers map[string][]pullLayer, images []string) []pullLayer {
	var out []pullLayer
	for _, img := range images {
		if i := strings.Index(img, "/"); strings.HasPrefix(img, slowHost) && i > 0 {
			img = "docker.io" + img[i:]
		}
		out = append(out, layers[img]...)
	}
	return out
}

// diskUsage is the disk space of the files under root (each inode once).
func diskUsage(root string) int64 {
	seen := map[uint64]bool{}
	var n int64
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if !ok || seen[st.Ino] {
			return nil
		}
		seen[st.Ino] = true
		n += st.Blocks * 512
		return nil
	})
	return n
}

// leftIngests counts the content store's unfinished downloads.
func leftIngests(root string) int {
	es, _ := os.ReadDir(filepath.Join(root, "io.containerd.content.v1.content", "ingest"))
	return len(es)
}

// writeHostsFile makes host resolve to server (plain HTTP) in a hosts.toml directory.
func writeHostsFile(b *testing.B, dir, host, server string) {
	body := fmt.Sprintf("server = %q\n\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n", server, server)
	require.NoError(b, os.MkdirAll(filepath.Join(dir, host), 0o755))
	require.NoError(b, os.WriteFile(filepath.Join(dir, host, "hosts.toml"), []byte(body), 0o644))
}

func mustURL(b *testing.B, s string) *url.URL {
	u, err := url.Parse(s)
	require.NoError(b, err)
	return u
}

func firstLine(s string, n int) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > n {
		s = s[:n] + "..."
	}
	return s
}
