//go:build integration

package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
)

// blobRegistry is a minimal registry on 127.0.0.1 serving one repository from
// memory, where a test can serve bytes that do not match the manifest.
type blobRegistry struct {
	srv       *httptest.Server
	manifests map[string][]byte        // by tag
	blobs     map[digest.Digest][]byte // what is served for a digest
	slow      map[digest.Digest]bool   // served at 4 KiB per 100 ms
	stall     map[digest.Digest]bool   // 4 KiB served, then nothing until the client leaves

	mu   sync.Mutex
	gets map[digest.Digest]int // blob GETs served
}

func newBlobRegistry(t *testing.T) *blobRegistry {
	r := &blobRegistry{manifests: map[string][]byte{}, blobs: map[digest.Digest][]byte{}, slow: map[digest.Digest]bool{}, stall: map[digest.Digest]bool{}, gets: map[digest.Digest]int{}}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		p := req.URL.Path
		switch {
		case p == "/v2/" || p == "/v2":
			w.WriteHeader(http.StatusOK)
		case strings.Contains(p, "/manifests/"):
			tag := p[strings.LastIndex(p, "/")+1:]
			r.mu.Lock()
			m, ok := r.manifests[tag]
			if !ok {
				if b, ok2 := r.blobs[digest.Digest(tag)]; ok2 {
					m, ok = b, true
				}
			}
			r.mu.Unlock()
			if !ok {
				http.NotFound(w, req)
				return
			}
			w.Header().Set("Content-Type", ocispec.MediaTypeImageManifest)
			w.Header().Set("Docker-Content-Digest", digest.FromBytes(m).String())
			w.Header().Set("Content-Length", fmt.Sprint(len(m)))
			if req.Method != http.MethodHead {
				w.Write(m)
			}
		case strings.Contains(p, "/blobs/"):
			d := digest.Digest(p[strings.LastIndex(p, "/")+1:])
			r.mu.Lock()
			b, ok := r.blobs[d]
			slow, stall := r.slow[d], r.stall[d]
			if ok && req.Method == http.MethodGet {
				r.gets[d]++
			}
			r.mu.Unlock()
			if !ok {
				http.NotFound(w, req)
				return
			}
			w.Header().Set("Content-Length", fmt.Sprint(len(b)))
			if req.Method == http.MethodHead {
				return
			}
			if stall {
				w.Write(b[:min(4096, len(b)-1)])
				w.(http.Flusher).Flush()
				<-req.Context().Done()
				return
			}
			if !slow {
				w.Write(b)
				return
			}
			for len(b) > 0 && req.Context().Err() == nil {
				n := min(4096, len(b))
				if _, err := w.Write(b[:n]); err != nil {
					return
				}
				w.(http.Flusher).Flush()
				b = b[n:]
				time.Sleep(100 * time.Millisecond)
			}
		default:
			http.NotFound(w, req)
		}
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// image adds an image of one layer holding file with data under tag (diffID, if
// set, is what the config claims). It returns the layer's digest; the manifest,
// config and layer are served as they are.
func (r *blobRegistry) image(t *testing.T, tag, file, data string, diffID digest.Digest) digest.Digest {
	return r.layeredImage(t, tag, []layerFile{{file, data, diffID}})[0]
}

type layerFile struct {
	file, data string
	diffID     digest.Digest // "" for the true one
}

// layeredImage adds an image with a layer per entry, bottom first, and returns the
// layers' digests.
func (r *blobRegistry) layeredImage(t *testing.T, tag string, files []layerFile) []digest.Digest {
	return r.configuredImage(t, tag, files, ocispec.ImageConfig{Cmd: []string{"/" + files[len(files)-1].file}})
}

// configuredImage is layeredImage with the image config's Config given.
func (r *blobRegistry) configuredImage(t *testing.T, tag string, files []layerFile, config ocispec.ImageConfig) []digest.Digest {
	var descs []ocispec.Descriptor
	var diffIDs, digests []digest.Digest
	for _, f := range files {
		var tarBuf bytes.Buffer
		tw := tar.NewWriter(&tarBuf)
		require.NoError(t, tw.WriteHeader(&tar.Header{Name: f.file, Mode: 0o644, Size: int64(len(f.data)), Typeflag: tar.TypeReg}))
		_, err := tw.Write([]byte(f.data))
		require.NoError(t, err)
		require.NoError(t, tw.Close())
		diffID := f.diffID
		if diffID == "" {
			diffID = digest.FromBytes(tarBuf.Bytes())
		}
		var gz bytes.Buffer
		zw := gzip.NewWriter(&gz)
		_, err = zw.Write(tarBuf.Bytes())
		require.NoError(t, err)
		require.NoError(t, zw.Close())
		layer := gz.Bytes()
		r.mu.Lock()
		r.blobs[digest.FromBytes(layer)] = layer
		r.mu.Unlock()
		descs = append(descs, ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayerGzip, Digest: digest.FromBytes(layer), Size: int64(len(layer))})
		diffIDs = append(diffIDs, diffID)
		digests = append(digests, digest.FromBytes(layer))
	}
	cfg, err := json.Marshal(ocispec.Image{
		Platform: ocispec.Platform{OS: "linux", Architecture: "amd64"},
		Config:   config,
		RootFS:   ocispec.RootFS{Type: "layers", DiffIDs: diffIDs},
	})
	require.NoError(t, err)
	man, err := json.Marshal(ocispec.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageManifest,
		Config:    ocispec.Descriptor{MediaType: ocispec.MediaTypeImageConfig, Digest: digest.FromBytes(cfg), Size: int64(len(cfg))},
		Layers:    descs,
	})
	require.NoError(t, err)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.blobs[digest.FromBytes(cfg)] = cfg
	r.manifests[tag] = man
	r.blobs[digest.FromBytes(man)] = man
	return digests
}

// hostsDir writes a hosts.toml that sends host to this registry over plain HTTP.
func (r *blobRegistry) hostsDir(t *testing.T, host string) string {
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, host), 0o755))
	body := fmt.Sprintf("server = %q\n\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n", r.srv.URL, r.srv.URL)
	require.NoError(t, os.WriteFile(filepath.Join(dir, host, "hosts.toml"), []byte(body), 0o644))
	return dir
}

// Layers stream from the registry straight into the snapshotter. A layer whose
// bytes do not match the manifest's digest, or whose uncompressed digest does not
// match the config, fails the pull and leaves no image and no snapshot behind; a
// good one unpacks and runs.
func TestPullVerifiesStreamedLayers(t *testing.T) {
	requireRoot(t)
	const host = "tamper.test"
	reg := newBlobRegistry(t)

	good := reg.image(t, "good", "hello", "hello from a streamed layer\n", "")
	reg.image(t, "wrongdiffid", "x", "some data\n", digest.FromString("not the tar"))
	// Same size, other bytes: the registry serves what the manifest does not
	// name. One still decompresses (a changed gzip header time), one does not.
	for tag, at := range map[string]func(int) int{"tampered": func(int) int { return 4 }, "corrupt": func(n int) int { return n - 5 }} {
		d := reg.image(t, tag, "evil", "original "+tag+"\n", "")
		b := append([]byte(nil), reg.blobs[d]...)
		b[at(len(b))] ^= 0xff
		reg.blobs[d] = b
	}

	env := harness.New(t, harness.Options{Shimd: harness.ShimdOptions{
		ExtraConfig: fmt.Sprintf("[registry]\nconfig_path = %q\n", reg.hostsDir(t, host)),
	}})
	is := env.Shimd.Images(t)

	for tag, want := range map[string]string{"tampered": "does not match digest", "corrupt": "does not match digest", "wrongdiffid": "uncompressed digest"} {
		ref := host + "/repo/img:" + tag
		_, err := is.PullImage(ctxT(t, time.Minute), &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
		require.Error(t, err, tag)
		require.Equal(t, codes.FailedPrecondition, status.Code(err), "%s: %v", tag, err)
		require.Contains(t, err.Error(), want)
		require.Nil(t, imageStatus(t, is, ref), "%s: a failed pull left an image", tag)
	}
	// Nothing but committed snapshots of good layers may exist: none yet.
	cl := env.Containerd.Client(t)
	ctx := namespaces.WithNamespace(ctxT(t, time.Minute), env.Namespace)
	require.Empty(t, snapshotNames(t, cl), "snapshots left by failed pulls")

	ref := host + "/repo/img:good"
	resp, err := is.PullImage(ctxT(t, time.Minute), &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
	require.NoError(t, err)
	img := imageStatus(t, is, ref)
	require.NotNil(t, img)
	require.Equal(t, resp.ImageRef, img.Id)
	// The compressed layer is not kept; its snapshot is.
	_, err = cl.ContentStore().Info(ctx, good)
	require.Error(t, err, "the layer blob was stored")
	require.Len(t, snapshotNames(t, cl), 1)
	// The unpacked file is the layer's.
	var found bool
	filepath.WalkDir(filepath.Join(env.Containerd.Root(), "io.containerd.snapshotter.v1.overlayfs", "snapshots"), func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Name() == "hello" {
			b, _ := os.ReadFile(p)
			found = string(b) == "hello from a streamed layer\n"
		}
		return nil
	})
	require.True(t, found, "the layer's file is not in the snapshot")
	removeImage(t, is, ref)
}

// shimd killed with -9 in the middle of a pull leaves an extraction snapshot, the
// layers committed below it and a lease in containerd; the restarted shimd removes
// them all before it serves, and the image pulls again.
func TestKill9DuringPullLeavesNothing(t *testing.T) {
	requireRoot(t)
	const host = "slow.test"
	reg := newBlobRegistry(t)
	// Three layers, the top one slow: where layers are extracted at once (the
	// default on containerd 2.x), the two below are committed, without a parent
	// and then rebased, while the top one is still being written.
	layer := reg.layeredImage(t, "v1", []layerFile{{file: "a", data: "bottom\n"}, {file: "b", data: "middle\n"},
		{file: "slow", data: textData("slowly served", 256<<10)}})[2]
	reg.mu.Lock()
	reg.slow[layer] = true
	reg.mu.Unlock()
	env := harness.New(t, harness.Options{Shimd: harness.ShimdOptions{
		ExtraConfig: fmt.Sprintf("[registry]\nconfig_path = %q\n", reg.hostsDir(t, host)),
	}})
	cl := env.Containerd.Client(t)
	ctx := namespaces.WithNamespace(ctxT(t, 2*time.Minute), env.Namespace)

	ref := host + "/repo/img:v1"
	is := env.Shimd.Images(t)
	go func() {
		_, _ = is.PullImage(ctxT(t, time.Minute), &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
	}()
	require.Eventually(t, func() bool {
		extracting, committed := 0, 0
		for _, n := range snapshotNames(t, cl) {
			if strings.HasPrefix(n, "extract-") {
				extracting++
			} else {
				committed++
			}
		}
		return extracting == 1 && committed == 2
	}, 30*time.Second, 20*time.Millisecond, "the pull never had the two layers below committed and the top one extracting")
	ls, err := cl.LeasesService().List(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, ls, "the pull holds no lease")

	env.Shimd.Kill9()
	env.Shimd.Start(t)
	waitReady(t, env.Shimd.Runtime(t))
	require.Empty(t, snapshotNames(t, cl), "snapshots of the interrupted pull")
	ls, err = cl.LeasesService().List(ctx)
	require.NoError(t, err)
	require.Empty(t, ls, "leases of the interrupted pull")

	reg.mu.Lock()
	reg.slow[layer] = false
	reg.mu.Unlock()
	is = env.Shimd.Images(t)
	_, err = is.PullImage(ctxT(t, time.Minute), &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
	require.NoError(t, err)
	require.Len(t, snapshotNames(t, cl), 3)
	removeImage(t, is, ref)
}

// Concurrent pulls of two images that share their bottom layer download it once and
// unpack it once; each image gets its own top layer on the shared one.
func TestConcurrentPullsShareLayers(t *testing.T) {
	requireRoot(t)
	const host = "share.test"
	reg := newBlobRegistry(t)
	base := textData("base", 64<<10)
	a := reg.layeredImage(t, "a", []layerFile{{file: "base", data: base}, {file: "a", data: "top of a\n"}})
	b := reg.layeredImage(t, "b", []layerFile{{file: "base", data: base}, {file: "b", data: "top of b\n"}})
	require.Equal(t, a[0], b[0])
	env := harness.New(t, harness.Options{Shimd: harness.ShimdOptions{
		ExtraConfig: fmt.Sprintf("[registry]\nconfig_path = %q\n", reg.hostsDir(t, host)),
	}})
	is := env.Shimd.Images(t)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, tag := range []string{"a", "b"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = is.PullImage(ctxT(t, time.Minute), &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: host + "/repo/img:" + tag}})
		}()
	}
	wg.Wait()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	reg.mu.Lock()
	require.Equal(t, 1, reg.gets[a[0]], "the shared layer was downloaded %d times", reg.gets[a[0]])
	require.Equal(t, 1, reg.gets[a[1]])
	require.Equal(t, 1, reg.gets[b[1]])
	reg.mu.Unlock()

	cl := env.Containerd.Client(t)
	names := snapshotNames(t, cl)
	require.Len(t, names, 3, "base, a on base, b on base: %v", names)
	for _, tag := range []string{"a", "b"} {
		require.NotNil(t, imageStatus(t, is, host+"/repo/img:"+tag))
		removeImage(t, is, host+"/repo/img:"+tag)
	}
}

// snapshotNames lists the overlayfs snapshots in shimd's namespace.
func snapshotNames(t *testing.T, cl *client.Client) []string {
	var names []string
	ctx := ctxT(t, time.Minute) // the client's default namespace is the Env's
	require.NoError(t, cl.SnapshotService("overlayfs").Walk(ctx, func(_ context.Context, i snapshots.Info) error {
		names = append(names, i.Name)
		return nil
	}))
	return names
}

// Failed pulls (a tampered layer, a corrupt one, a wrong diff id), pulls whose caller
// gave up, and event subscribers that come and go leave no goroutine or descriptor
// behind in shimd.
func TestPullAndEventLeaks(t *testing.T) {
	requireRoot(t)
	const host = "leak.test"
	reg := newBlobRegistry(t)
	reg.image(t, "good", "ok", "fine\n", "")
	reg.image(t, "wrongdiffid", "x", "data\n", digest.FromString("not the tar"))
	for tag, at := range map[string]int{"tampered": 4, "corrupt": -5} {
		d := reg.image(t, tag, "evil", "original "+tag+"\n", "")
		b := append([]byte(nil), reg.blobs[d]...)
		if at < 0 {
			at += len(b)
		}
		b[at] ^= 0xff
		reg.blobs[d] = b
	}
	slow := reg.image(t, "slow", "slow", textData("slow", 64<<10), "") // a few 4 KiB chunks gzipped
	reg.mu.Lock()
	reg.slow[slow] = true
	reg.mu.Unlock()

	sock := filepath.Join(t.TempDir(), "debug.sock")
	env := harness.New(t, harness.Options{Shimd: harness.ShimdOptions{ExtraConfig: fmt.Sprintf(
		"[registry]\nconfig_path = %q\n[debug]\naddress = %q\n", reg.hostsDir(t, host), sock)}})
	is, rs := env.Shimd.Images(t), env.Shimd.Runtime(t)
	debug := debugClient(sock)
	pullRef := func(ctx context.Context, tag string) error {
		_, err := is.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: host + "/repo/img:" + tag}})
		return err
	}
	require.NoError(t, pullRef(ctxT(t, time.Minute), "good")) // warm up
	removeImage(t, is, host+"/repo/img:good")
	base := stableStats(t, debug)
	t.Logf("baseline: %d goroutines, %d open fds", base.Goroutines, base.OpenFDs)

	for round := 0; round < 3; round++ {
		start := time.Now()
		for _, tag := range []string{"tampered", "corrupt", "wrongdiffid"} {
			require.Error(t, pullRef(ctxT(t, time.Minute), tag), tag)
		}
		t.Logf("round %d: failed pulls took %s", round, time.Since(start).Round(time.Millisecond))
		// The caller gives up; the pull goes on for the next caller, then ends.
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		require.Error(t, pullRef(ctx, "slow"))
		cancel()
		start = time.Now()
		require.Eventually(t, func() bool { return imageStatus(t, is, host+"/repo/img:slow") != nil },
			time.Minute, 100*time.Millisecond, "the abandoned pull never finished")
		t.Logf("round %d: the abandoned pull finished %s later", round, time.Since(start).Round(time.Millisecond))
		removeImage(t, is, host+"/repo/img:slow")
		ectx, ecancel := context.WithCancel(context.Background())
		stream, err := rs.GetContainerEvents(ectx, &runtimeapi.GetEventsRequest{})
		require.NoError(t, err)
		go func() {
			for {
				if _, err := stream.Recv(); err != nil {
					return
				}
			}
		}()
		time.Sleep(50 * time.Millisecond)
		ecancel()
	}
	waitSettled(t, debug, base, debugStats{Goroutines: 5, OpenFDs: 2}, 60*time.Second)
	require.Empty(t, snapshotNames(t, env.Containerd.Client(t)), "snapshots left by failed pulls")
}

// A pull that receives nothing for registry.pull_progress_timeout is cancelled with
// Unavailable and a message that says so, and leaves nothing behind.
func TestStalledPullIsCancelled(t *testing.T) {
	requireRoot(t)
	const host = "stall.test"
	reg := newBlobRegistry(t)
	layer := reg.image(t, "v1", "big", textData("stalled", 256<<10), "")
	reg.mu.Lock()
	reg.stall[layer] = true
	reg.mu.Unlock()
	env := harness.New(t, harness.Options{Shimd: harness.ShimdOptions{ExtraConfig: fmt.Sprintf(
		"[registry]\nconfig_path = %q\npull_progress_timeout = \"1s\"\n", reg.hostsDir(t, host))}})
	is := env.Shimd.Images(t)
	start := time.Now()
	_, err := is.PullImage(ctxT(t, time.Minute), &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: host + "/repo/img:v1"}})
	took := time.Since(start)
	require.Error(t, err)
	require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	require.Contains(t, err.Error(), "no progress for 1s")
	require.Less(t, took, 30*time.Second, "the stalled pull was not cancelled by the 1s timeout")
	t.Logf("stalled pull ended after %s: %v", took.Round(time.Millisecond), err)
	require.Nil(t, imageStatus(t, is, host+"/repo/img:v1"))
	require.Eventually(t, func() bool { return len(snapshotNames(t, env.Containerd.Client(t))) == 0 },
		10*time.Second, 100*time.Millisecond, "snapshots of the stalled pull")
}

// textData is about size bytes of numbered lines (gzip keeps about a third).
func textData(prefix string, size int) string {
	var b strings.Builder
	for i := 0; b.Len() < size; i++ {
		fmt.Fprintf(&b, "%s line %d %x\n", prefix, i, i*7919)
	}
	return b.String()
}

// Layers are kept only unpacked, per snapshotter: an image pulled for the default
// runtime handler (overlayfs) is absent for a handler on another snapshotter
// (native) until pulled for it, and a container of that handler says so rather
// than failing obscurely; once pulled for it, the container runs.
func TestImagePerRuntimeHandlerSnapshotter(t *testing.T) {
	requireRoot(t)
	extra := fmt.Sprintf("[runtimes.native]\ntype = %q\nbinary_name = %q\nroot = %q\nsnapshotter = \"native\"\n",
		"io.containerd.runc.v2", harness.Tools().Runc, filepath.Join(t.TempDir(), "runc"))
	env, _ := imageEnv(t, harness.Options{Shimd: harness.ShimdOptions{ExtraConfig: extra}})
	pull(t, env, busyboxImage)
	is, rs := env.Shimd.Images(t), env.Shimd.Runtime(t)
	statusFor := func(handler string) *runtimeapi.Image {
		resp, err := is.ImageStatus(ctxT(t, time.Minute), &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: busyboxImage, RuntimeHandler: handler}})
		require.NoError(t, err)
		return resp.Image
	}
	require.NotNil(t, statusFor(""))
	require.Nil(t, statusFor("native"), "not unpacked for native yet")

	cfg := podConfig("native")
	resp, err := rs.RunPodSandbox(ctxT(t, 2*time.Minute), &runtimeapi.RunPodSandboxRequest{Config: cfg, RuntimeHandler: "native"})
	require.NoError(t, err)
	podID := resp.PodSandboxId
	ctr := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "app"}, Image: &runtimeapi.ImageSpec{Image: busyboxImage},
		Command: []string{"sleep", "3600"}, Linux: &runtimeapi.LinuxContainerConfig{},
	}
	_, err = rs.CreateContainer(ctxT(t, time.Minute), &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: ctr, SandboxConfig: cfg})
	require.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)
	require.Contains(t, err.Error(), "pull it with this runtime handler")

	_, err = is.PullImage(ctxT(t, time.Minute), &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: busyboxImage, RuntimeHandler: "native"}})
	require.NoError(t, err)
	require.NotNil(t, statusFor("native"))
	cr, err := rs.CreateContainer(ctxT(t, time.Minute), &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: ctr, SandboxConfig: cfg})
	require.NoError(t, err)
	_, err = rs.StartContainer(ctxT(t, time.Minute), &runtimeapi.StartContainerRequest{ContainerId: cr.ContainerId})
	require.NoError(t, err)
	out, err := execSync(t, rs, cr.ContainerId, 10, "echo", "on-native")
	require.NoError(t, err)
	require.Equal(t, "on-native\n", string(out.Stdout))
	stopRemove(t, rs, podID)
	removeImage(t, is, busyboxImage)
}
