package harness

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/distribution/reference"
)

// DefaultRegistryStorage is the docker-registry storage directory that
// critest/images/cmd/mkimages fills with the offline image set;
// SHIMD_REGISTRY_STORAGE overrides it.
const DefaultRegistryStorage = "/var/cache/shimd/registry"

// RegistryBinary is Debian's CNCF distribution registry (docker-registry 2.8).
const RegistryBinary = "/usr/bin/docker-registry"

// MirroredHosts are the upstream registries WriteHostsDir points at the
// local registry. The image set keeps each upstream repository path
// (registry.k8s.io/e2e-test-images/busybox is e2e-test-images/busybox,
// docker.io/library/busybox is library/busybox), so one registry serves
// them all.
var MirroredHosts = []string{"registry.k8s.io", "k8s.gcr.io", "gcr.io", "docker.io", "public.ecr.aws", "quay.io"}

// manifestTypes are what Digest accepts, in containerd's order.
var manifestTypes = []string{
	"application/vnd.docker.distribution.manifest.list.v2+json",
	"application/vnd.docker.distribution.manifest.v2+json",
	"application/vnd.oci.image.index.v1+json",
	"application/vnd.oci.image.manifest.v1+json",
}

// RegistryOptions configures StartRegistry. The zero value serves the
// shared image set read-only without authentication.
type RegistryOptions struct {
	// Dir holds the registry's config, log, htpasswd file and, when
	// Writable, its storage. Empty: a new base directory.
	Dir string
	// Htpasswd turns on HTTP basic authentication for these users
	// (user -> password), bcrypt-hashed with apache2-utils' htpasswd.
	Htpasswd map[string]string
	// Writable gives the registry a private copy of the image set (blobs
	// hard-linked, repository metadata copied) that a test may push to.
	Writable bool
	// Storage is the directory to serve instead of the offline image set
	// (read-only; nothing builds it): the kubeadm set, for one.
	Storage string
	// IP is the address to listen on. Empty: 127.0.0.1. Nodes in network
	// namespaces of their own (critest/kubeadm) reach it on their bridge.
	IP string
}

// Registry is a docker-registry on 127.0.0.1 started by the harness.
type Registry struct {
	host    string // 127.0.0.1:PORT
	storage string
	users   map[string]string
	proc    *daemon
}

var imageSet struct {
	once    sync.Once
	storage string
	err     error
}

// EnsureImages builds the offline image set into the registry storage
// unless it is up to date, once per test binary, by running
// "go run ./critest/images/cmd/mkimages" in the repository (seconds when
// nothing changed, about two minutes on a machine that never built
// busybox), and returns the storage directory. With SHIMD_IMAGES_PREBUILT=1 it
// builds nothing and uses the storage as it is: for hosts without the Go
// toolchain, which get a copy of a storage built elsewhere.
func EnsureImages(t testing.TB) string {
	t.Helper()
	s := &imageSet
	s.once.Do(func() {
		s.storage = or(os.Getenv("SHIMD_REGISTRY_STORAGE"), DefaultRegistryStorage)
		if os.Getenv("SHIMD_IMAGES_PREBUILT") == "1" {
			if _, err := os.Stat(s.storage); err != nil {
				s.err = fmt.Errorf("SHIMD_IMAGES_PREBUILT=1: %w", err)
			}
			return
		}
		root, err := RepoRoot()
		if err != nil {
			s.err = err
			return
		}
		cmd := exec.Command("go", "run", "./critest/images/cmd/mkimages", "-storage", s.storage)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			s.err = fmt.Errorf("building the offline image set (critest/images/build.sh) failed: %w\n%s", err, out)
		}
	})
	if s.err != nil {
		t.Fatalf("harness: %v", s.err)
	}
	return s.storage
}

// StartRegistry starts docker-registry on 127.0.0.1 at a free port over
// the offline image set (see EnsureImages), waits until it answers, and
// stops it by PID at the end of the test.
func StartRegistry(t testing.TB, opts RegistryOptions) *Registry {
	t.Helper()
	summaryOf(t)
	if _, err := os.Stat(RegistryBinary); err != nil {
		t.Fatalf("harness: %v (apt-get install docker-registry)", err)
	}
	var shared string
	if opts.Storage != "" {
		shared = opts.Storage
	} else {
		shared = EnsureImages(t)
	}
	dir := opts.Dir
	if dir == "" {
		dir = NewBaseDir(t)
	}
	r := &Registry{storage: shared, users: opts.Htpasswd}
	if opts.Writable {
		r.storage = filepath.Join(dir, "storage")
		if err := copyStorage(shared, r.storage); err != nil {
			t.Fatalf("harness: copy registry storage: %v", err)
		}
	}
	htpasswd := ""
	if len(opts.Htpasswd) > 0 {
		htpasswd = filepath.Join(dir, "htpasswd")
		if err := writeHtpasswd(htpasswd, opts.Htpasswd); err != nil {
			t.Fatalf("harness: %v", err)
		}
	}
	var err error
	for attempt := 0; attempt < 3; attempt++ { // another process may take the free port first
		if err = r.start(dir, htpasswd, or(opts.IP, "127.0.0.1"), !opts.Writable); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	r.proc.logOnFailure(t)
	t.Cleanup(r.Stop)
	return r
}

func (r *Registry) start(dir, htpasswd, ip string, readOnly bool) error {
	port, err := FreeTCPPort()
	if err != nil {
		return err
	}
	r.host = net.JoinHostPort(ip, strconv.Itoa(port))
	cfg := fmt.Sprintf(`version: 0.1
log:
  level: info
storage:
  filesystem:
    rootdirectory: %q
  delete:
    enabled: %t
  maintenance:
    uploadpurging:
      enabled: false
    readonly:
      enabled: %t
http:
  addr: %q
  secret: shimd-harness
`, r.storage, !readOnly, readOnly, r.host)
	if htpasswd != "" {
		cfg += fmt.Sprintf("auth:\n  htpasswd:\n    realm: shimd-test\n    path: %q\n", htpasswd)
	}
	cfgPath := filepath.Join(dir, "registry.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return err
	}
	r.proc = &daemon{name: "docker-registry", path: RegistryBinary, args: []string{"serve", cfgPath},
		logPath: filepath.Join(dir, "registry.log")}
	if err := r.proc.start(); err != nil {
		return err
	}
	err = r.proc.waitReady(readyTimeout, func() error {
		resp, err := http.Get(r.URL() + "/v2/")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusUnauthorized {
			return fmt.Errorf("GET /v2/: %s", resp.Status)
		}
		return nil
	})
	if err != nil {
		r.proc.stop()
	}
	return err
}

// Host is "127.0.0.1:PORT" (or RegistryOptions.IP:PORT).
func (r *Registry) Host() string { return r.host }

// URL is "http://127.0.0.1:PORT".
func (r *Registry) URL() string { return "http://" + r.host }

// Storage is the directory the registry serves.
func (r *Registry) Storage() string { return r.storage }

// LogPath is the registry's log file.
func (r *Registry) LogPath() string { return r.proc.logPath }

// Stop stops the registry (SIGTERM, SIGKILL after 10s) by its PID.
func (r *Registry) Stop() { r.proc.stop() }

// LocalRef turns an upstream reference into the same image's name on this
// registry: docker.io/library/busybox:1.36 -> 127.0.0.1:PORT/library/busybox:1.36.
func (r *Registry) LocalRef(ref string) string {
	n, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return r.host + "/" + ref // let the caller's pull report it
	}
	out := r.host + "/" + reference.Path(n)
	if tagged, ok := n.(reference.Tagged); ok {
		out += ":" + tagged.Tag()
	}
	if dg, ok := n.(reference.Digested); ok {
		out += "@" + dg.Digest().String()
	} else if _, ok := n.(reference.Tagged); !ok {
		out += ":latest"
	}
	return out
}

// Digest is the manifest (or index) digest the registry serves for an
// upstream reference such as "registry.k8s.io/pause:3.9".
func (r *Registry) Digest(t testing.TB, ref string) string {
	t.Helper()
	n, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	if dg, ok := n.(reference.Digested); ok {
		return dg.Digest().String()
	}
	tag := "latest"
	if tagged, ok := n.(reference.Tagged); ok {
		tag = tagged.Tag()
	}
	req, _ := http.NewRequest(http.MethodHead, r.URL()+"/v2/"+reference.Path(n)+"/manifests/"+tag, nil)
	req.Header.Set("Accept", strings.Join(manifestTypes, ", "))
	for _, u := range sortedKeys(r.users) {
		req.SetBasicAuth(u, r.users[u])
		break
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	resp.Body.Close()
	d := resp.Header.Get("Docker-Content-Digest")
	if resp.StatusCode != http.StatusOK || d == "" {
		t.Fatalf("harness: HEAD manifest of %s on %s: %s", ref, r.host, resp.Status)
	}
	return d
}

// WriteHostsDir writes containerd-format mirror configs for MirroredHosts
// into dir (a registry config_path, or config.HostDirFromRoot for a
// client): dir/<host>/hosts.toml names the real registry as server and
// this registry as a pull/resolve mirror, tried first. An image the local
// registry lacks then falls through to the real registry, which this
// machine cannot reach: use WriteHermeticHostsDir where a missing image
// must be a plain "not found".
func (r *Registry) WriteHostsDir(t testing.TB, dir string) {
	t.Helper()
	r.writeHosts(t, dir, false)
}

// WriteHermeticHostsDir is WriteHostsDir with this registry as the server
// too, so that nothing is ever fetched from elsewhere.
func (r *Registry) WriteHermeticHostsDir(t testing.TB, dir string) {
	t.Helper()
	r.writeHosts(t, dir, true)
}

func (r *Registry) writeHosts(t testing.TB, dir string, hermetic bool) {
	t.Helper()
	for _, h := range MirroredHosts {
		server := "https://" + h
		if h == "docker.io" {
			server = "https://registry-1.docker.io"
		}
		if hermetic {
			server = r.URL()
		}
		// containerd 1.6 ignores a file with only a server line (and then
		// goes to the real registry): the host table is what it reads.
		body := fmt.Sprintf(`# Written by shimd's test harness (critest/harness/registry.go).
server = %q

[host.%q]
  capabilities = ["pull", "resolve"]
`, server, r.URL())
		if err := os.MkdirAll(filepath.Join(dir, h), 0o755); err != nil {
			t.Fatalf("harness: %v", err)
		}
		if err := os.WriteFile(filepath.Join(dir, h, "hosts.toml"), []byte(body), 0o644); err != nil {
			t.Fatalf("harness: %v", err)
		}
	}
}

// writeHtpasswd writes a bcrypt htpasswd file (the only kind the registry
// accepts) with apache2-utils' htpasswd.
func writeHtpasswd(path string, users map[string]string) error {
	var b strings.Builder
	for _, u := range sortedKeys(users) {
		out, err := exec.Command("htpasswd", "-Bbn", u, users[u]).Output()
		if err != nil {
			return fmt.Errorf("htpasswd -Bbn %s: %w (apt-get install apache2-utils)", u, err)
		}
		b.WriteString(strings.TrimSpace(string(out)) + "\n")
	}
	return os.WriteFile(path, []byte(b.String()), 0o600)
}

// copyStorage makes a private writable copy of a registry storage:
// blob data is immutable (the registry writes blobs elsewhere and renames
// them in), so blobs are hard-linked; link files are rewritten in place on
// a push, so everything else is copied.
func copyStorage(src, dst string) error {
	return filepath.Walk(src, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if fi.IsDir() {
			if fi.Name() == "_uploads" {
				return filepath.SkipDir
			}
			return os.MkdirAll(target, 0o755)
		}
		if !fi.Mode().IsRegular() {
			return nil
		}
		if strings.Contains(rel, "/blobs/") && os.Link(p, target) == nil {
			return nil
		}
		return copyRegular(p, target, fi.Mode().Perm())
	})
}

func copyRegular(src, dst string, perm os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
