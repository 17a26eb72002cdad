//go:build integration

package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/stretchr/testify/require"

	"github.com/shimd/shimd/critest/harness"
)

// The CVE tests need images no honest registry serves: layers with links out of the
// rootfs, configs with odd users, volumes and labels, layers with foreign URLs. A
// small registry in the test process serves them (the read side of the OCI
// distribution API: manifests and blobs by digest or tag), on top of the busybox
// image of the offline image set, whose blobs it reads from the shared storage.

// cveRequest is one request the registry (or a foreign-layer server) saw.
type cveRequest struct {
	Method, Path, Authorization string
}

// cveRegistry serves crafted images on 127.0.0.1.
type cveRegistry struct {
	host     string // 127.0.0.1:PORT
	user     string // with password, basic auth is required
	password string
	mu       sync.Mutex
	blobs    map[digest.Digest][]byte
	mfs      map[string]digest.Digest // "name:tag" -> manifest digest
	mtypes   map[digest.Digest]string
	seen     []cveRequest
}

// startCVERegistry starts a registry and writes its hosts.toml into hostsDir (the
// directory shimd's [registry] config_path names).
func startCVERegistry(t *testing.T, hostsDir, user, password string) *cveRegistry {
	t.Helper()
	r := &cveRegistry{user: user, password: password, blobs: map[digest.Digest][]byte{},
		mfs: map[string]digest.Digest{}, mtypes: map[digest.Digest]string{}}
	r.host = serveHTTP(t, http.HandlerFunc(r.serve))
	dir := filepath.Join(hostsDir, r.host)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	url := "http://" + r.host
	require.NoError(t, os.WriteFile(filepath.Join(dir, "hosts.toml"),
		[]byte(fmt.Sprintf("server = %q\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n", url, url)), 0o644))
	return r
}

// serveHTTP serves h on a free loopback port until the test ends; it returns host:port.
func serveHTTP(t *testing.T, h http.Handler) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: h}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { srv.Close() })
	return l.Addr().String()
}

func (r *cveRegistry) requests() []cveRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]cveRequest(nil), r.seen...)
}

func (r *cveRegistry) serve(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	r.seen = append(r.seen, cveRequest{req.Method, req.URL.Path, req.Header.Get("Authorization")})
	r.mu.Unlock()
	if r.user != "" {
		if u, p, ok := req.BasicAuth(); !ok || u != r.user || p != r.password {
			w.Header().Set("WWW-Authenticate", `Basic realm="cve"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
	}
	path := strings.TrimPrefix(req.URL.Path, "/v2/")
	if path == "" || req.URL.Path == "/v2" {
		w.WriteHeader(http.StatusOK)
		return
	}
	if i := strings.LastIndex(path, "/manifests/"); i >= 0 {
		name, ref := path[:i], path[i+len("/manifests/"):]
		r.mu.Lock()
		dgst, ok := r.mfs[name+":"+ref]
		if !ok {
			dgst = digest.Digest(ref)
		}
		data, found := r.blobs[dgst]
		mt := r.mtypes[dgst]
		r.mu.Unlock()
		if !found || mt == "" {
			http.Error(w, "manifest unknown", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", mt)
		w.Header().Set("Docker-Content-Digest", dgst.String())
		writeBlob(w, req, data)
		return
	}
	if i := strings.LastIndex(path, "/blobs/"); i >= 0 {
		r.mu.Lock()
		data, found := r.blobs[digest.Digest(path[i+len("/blobs/"):])]
		r.mu.Unlock()
		if !found {
			http.Error(w, "blob unknown", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		writeBlob(w, req, data)
		return
	}
	http.NotFound(w, req)
}

func writeBlob(w http.ResponseWriter, req *http.Request, data []byte) {
	w.Header().Set("Content-Length", fmt.Sprint(len(data)))
	if req.Method == http.MethodHead {
		return
	}
	_, _ = w.Write(data)
}

func (r *cveRegistry) addBlob(data []byte) ocispec.Descriptor {
	d := digest.FromBytes(data)
	r.mu.Lock()
	r.blobs[d] = data
	r.mu.Unlock()
	return ocispec.Descriptor{Digest: d, Size: int64(len(data))}
}

// cveImage is an image to push: the busybox image's layers and config, changed.
type cveImage struct {
	Config ocispec.Image
	Layers []ocispec.Descriptor // compressed, in order
	blobs  map[digest.Digest][]byte
}

// busyboxBase reads docker.io/library/busybox:latest from the offline image set's
// registry storage (harness.EnsureImages builds it).
func busyboxBase(t *testing.T) *cveImage {
	t.Helper()
	storage := harness.EnsureImages(t)
	blob := func(d digest.Digest) []byte {
		data, err := os.ReadFile(filepath.Join(storage, "docker/registry/v2/blobs", d.Algorithm().String(), d.Encoded()[:2], d.Encoded(), "data"))
		require.NoError(t, err)
		return data
	}
	link, err := os.ReadFile(filepath.Join(storage, "docker/registry/v2/repositories/library/busybox/_manifests/tags/latest/current/link"))
	require.NoError(t, err)
	data := blob(digest.Digest(strings.TrimSpace(string(link))))
	var probe struct {
		Manifests []ocispec.Descriptor `json:"manifests"`
	}
	require.NoError(t, json.Unmarshal(data, &probe))
	if len(probe.Manifests) > 0 { // an index: the linux/amd64 manifest
		data = blob(probe.Manifests[0].Digest)
	}
	var m ocispec.Manifest
	require.NoError(t, json.Unmarshal(data, &m))
	img := &cveImage{blobs: map[digest.Digest][]byte{}}
	require.NoError(t, json.Unmarshal(blob(m.Config.Digest), &img.Config))
	for _, l := range m.Layers {
		img.blobs[l.Digest] = blob(l.Digest)
		img.Layers = append(img.Layers, ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayerGzip, Digest: l.Digest, Size: l.Size})
	}
	return img
}

// tarEntry is one entry of a crafted layer.
type tarEntry struct {
	Name, Link string
	Type       byte
	Mode       int64
	UID, GID   int
	Data       []byte
}

// addLayer appends a gzip'd layer of entries, written in the order given.
func (img *cveImage) addLayer(t *testing.T, entries ...tarEntry) ocispec.Descriptor {
	t.Helper()
	var raw bytes.Buffer
	tw := tar.NewWriter(&raw)
	for _, e := range entries {
		hdr := &tar.Header{Name: e.Name, Linkname: e.Link, Typeflag: e.Type, Mode: e.Mode, Uid: e.UID, Gid: e.GID, Size: int64(len(e.Data)), Format: tar.FormatPAX}
		require.NoError(t, tw.WriteHeader(hdr))
		_, err := tw.Write(e.Data)
		require.NoError(t, err)
	}
	require.NoError(t, tw.Close())
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, err := zw.Write(raw.Bytes())
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	d := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayerGzip, Digest: digest.FromBytes(gz.Bytes()), Size: int64(gz.Len())}
	img.blobs[d.Digest] = gz.Bytes()
	img.Layers = append(img.Layers, d)
	img.Config.RootFS.DiffIDs = append(img.Config.RootFS.DiffIDs, digest.FromBytes(raw.Bytes()))
	img.Config.History = append(img.Config.History, ocispec.History{CreatedBy: "cve test layer"})
	return d
}

// push stores img as name:tag (an OCI manifest) and returns the reference to pull.
func (r *cveRegistry) push(t *testing.T, img *cveImage, name, tag string) string {
	t.Helper()
	for d, data := range img.blobs {
		r.mu.Lock()
		r.blobs[d] = data
		r.mu.Unlock()
	}
	cfg, err := json.Marshal(img.Config)
	require.NoError(t, err)
	cd := r.addBlob(cfg)
	cd.MediaType = ocispec.MediaTypeImageConfig
	m := ocispec.Manifest{MediaType: ocispec.MediaTypeImageManifest, Config: cd, Layers: img.Layers}
	m.SchemaVersion = 2
	data, err := json.Marshal(m)
	require.NoError(t, err)
	md := r.addBlob(data)
	r.mu.Lock()
	r.mtypes[md.Digest] = ocispec.MediaTypeImageManifest
	r.mfs[name+":"+tag] = md.Digest
	r.mu.Unlock()
	return r.host + "/" + name + ":" + tag
}

// cveEnv is a shimd that pulls the offline image set from the harness registry and
// crafted images from a cveRegistry (authenticated when user is set).
func cveEnv(t *testing.T, opts harness.Options, user, password string) (*harness.Env, *cveRegistry) {
	t.Helper()
	reg := harness.StartRegistry(t, harness.RegistryOptions{})
	hosts := t.TempDir()
	reg.WriteHermeticHostsDir(t, hosts)
	cr := startCVERegistry(t, hosts, user, password)
	opts.Shimd.ExtraConfig += fmt.Sprintf("[registry]\nconfig_path = %q\n", hosts)
	return harness.New(t, opts), cr
}
