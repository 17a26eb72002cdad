// Command mkimages builds the offline image set that critest and shimd's
// tests pull, without docker: it builds busybox from Debian's source
// package (cached), compiles the helper programs under critest/images/cmd,
// assembles reproducible layers and image configs, and pushes every image,
// under the repository path of its upstream name, into a docker-registry
// storage directory. Tests then serve that directory read-only
// (critest/harness.StartRegistry) and mirror the upstream registries to it.
//
// Run from the repository root (critest/images/build.sh does):
//
//	go run ./critest/images/cmd/mkimages [-force] [-list]
//
// A stamp in the storage directory records the hash of the sources the set
// was built from; when it matches, mkimages does nothing. See
// critest/images/README.md.
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/shimd/shimd/critest/k8sversion"
)

const (
	defaultStorage = "/var/cache/shimd/registry"
	defaultCache   = "/var/cache/shimd/images"
	defaultTools   = "/var/cache/shimd/tools"
	stampFile      = "shimd-stamp"
	listFile       = "shimd-images.txt"
	// formatVersion changes when this program's output changes for the
	// same sources.
	formatVersion = "mkimages v1"
)

func main() {
	storage := flag.String("storage", envOr("SHIMD_REGISTRY_STORAGE", defaultStorage), "registry storage directory to fill")
	cache := flag.String("cache", defaultCache, "cache for the busybox build and its source package")
	force := flag.Bool("force", false, "rebuild and push even if the stamp says the storage is up to date")
	list := flag.Bool("list", false, "print the images (name, digest, what it is) after building")
	clean := flag.Bool("clean", false, "empty the storage first (drops names no longer in the set); implies -force")
	agnhost := flag.String("agnhost", filepath.Join(k8sversion.BinDir(envOr("SHIMD_TOOLS", defaultTools)), "agnhost"),
		"the agnhost binary for registry.k8s.io/e2e-test-images/agnhost (hack/tools.sh e2e, of the Kubernetes release KUBELET_VERSION); the image is left out when it is missing")
	kubeadm := flag.Bool("kubeadm", false, "build the kubeadm cluster's image set (control plane, kube-proxy, etcd, CoreDNS, flannel) from hack/tools.sh kubeadm's binaries instead, into -storage (default "+defaultKubeadmStorage+")")
	conformance := flag.Bool("conformance", false, "build the conformance image set (the images the Kubernetes [Conformance] tests pull beyond the test set; needs hack/tools.sh e2e's agnhost) into -storage (default "+defaultConformanceStorage+")")
	flag.Parse()
	start := time.Now()
	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "mkimages [%5.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	if *kubeadm {
		if !isFlagSet("storage") {
			*storage = envOr("SHIMD_KUBEADM_REGISTRY_STORAGE", defaultKubeadmStorage)
		}
		bin := k8sversion.BinDir(envOr("SHIMD_TOOLS", defaultTools))
		if err := buildKubeadm(kubeadmConfig{storage: *storage, cache: *cache, bin: bin, force: *force || *clean}, logf); err != nil {
			fmt.Fprintf(os.Stderr, "mkimages: %v\n", err)
			os.Exit(1)
		}
	} else {
		cfg := config{storage: *storage, cache: *cache, agnhost: *agnhost, force: *force, clean: *clean, catalog: catalog}
		if *conformance {
			if !isFlagSet("storage") {
				*storage = envOr("SHIMD_CONFORMANCE_REGISTRY_STORAGE", defaultConformanceStorage)
			}
			cfg.storage, cfg.catalog, cfg.keyPrefix = *storage, conformanceCatalog, "conformance set\n"
			cfg.sampleAPIServer = filepath.Join(k8sversion.BinDir(envOr("SHIMD_TOOLS", defaultTools)), "sample-apiserver")
		}
		if err := build(cfg, logf); err != nil {
			fmt.Fprintf(os.Stderr, "mkimages: %v\n", err)
			os.Exit(1)
		}
	}
	if *list {
		b, err := os.ReadFile(filepath.Join(*storage, listFile))
		if err != nil {
			fmt.Fprintf(os.Stderr, "mkimages: %v\n", err)
			os.Exit(1)
		}
		os.Stdout.Write(b)
	}
}

type config struct {
	storage, cache, agnhost string
	force, clean            bool
	// catalog makes the set's images (catalog, or conformanceCatalog);
	// keyPrefix tells the sets' stamps apart.
	catalog   func(inputs) ([]*image, error)
	keyPrefix string
	// sampleAPIServer is the sample API server binary (hack/tools.sh
	// sample-apiserver) of the conformance set; missing leaves its image out.
	sampleAPIServer string
}

func build(cfg config, logf func(string, ...any)) error {
	storage, cache, force, clean := cfg.storage, cfg.cache, cfg.force, cfg.clean
	repo, err := repoRoot()
	if err != nil {
		return err
	}
	for _, d := range []string{storage, cache} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	// One build at a time per storage directory (tests may start several).
	unlock, err := lock(storage + ".lock")
	if err != nil {
		return err
	}
	defer unlock()
	if clean {
		// Only what the registry and this program put there.
		for _, p := range []string{"docker", stampFile, listFile} {
			if err := os.RemoveAll(filepath.Join(storage, p)); err != nil {
				return err
			}
		}
	}

	bbKey, err := busyboxKey()
	if err != nil {
		return err
	}
	agnhost, agnhostTag, err := readAgnhost(cfg.agnhost)
	if err != nil {
		return err
	}
	agnhostKey := "no agnhost"
	if agnhost != nil {
		h := sha256.New()
		for _, n := range sortedKeys(agnhost) {
			fmt.Fprintf(h, "%s %x\n", n, sha256.Sum256(agnhost[n]))
		}
		agnhostKey = fmt.Sprintf("agnhost %s %x", agnhostTag, h.Sum(nil))
	}
	var sampleAPIServer []byte
	if cfg.sampleAPIServer != "" {
		sampleAPIServer, err = os.ReadFile(cfg.sampleAPIServer)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		if sampleAPIServer == nil {
			logf("no %s (hack/tools.sh sample-apiserver): its image is left out", cfg.sampleAPIServer)
		}
		agnhostKey += fmt.Sprintf("\nsample-apiserver %x", sha256.Sum256(sampleAPIServer))
	}
	pause, err := os.ReadFile(filepath.Join(repo, pauseProgram))
	if err != nil {
		return err
	}
	key, err := sourceKey(filepath.Join(repo, "critest/images"),
		fmt.Sprintf("%s%s\n%s\npause %x", cfg.keyPrefix, bbKey, agnhostKey, sha256.Sum256(pause)))
	if err != nil {
		return err
	}
	stamp := filepath.Join(storage, stampFile)
	if old, _ := os.ReadFile(stamp); !force && strings.TrimSpace(string(old)) == key {
		logf("%s is up to date (stamp %s)", storage, key[:16])
		return nil
	}

	bb, err := busybox(cache, logf)
	if err != nil {
		return err
	}
	in := inputs{Helpers: map[string][]byte{}, Agnhost: agnhost, AgnhostTag: agnhostTag, SampleAPIServer: sampleAPIServer}
	if in.Busybox, err = os.ReadFile(bb); err != nil {
		return err
	}
	if in.Applets, err = busyboxApplets(bb); err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "shimd-mkimages-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	if in.Helpers, err = buildHelpers(repo, work); err != nil {
		return err
	}
	in.Helpers["pause"] = pause
	logf("helpers built: %s; pause from %s", strings.Join(helperNames, ", "), pauseProgram)
	imgs, err := cfg.catalog(in)
	if err != nil {
		return err
	}
	logf("%d images assembled; pushing to %s", len(imgs), storage)

	reg, err := startRegistry(storage, work)
	if err != nil {
		return err
	}
	defer reg.stop()
	ps := newPusher(reg.URL)
	var listing []string
	for _, img := range imgs {
		p, err := render(img)
		if err != nil {
			return err
		}
		for _, name := range img.Names {
			repoPath, tag, err := repoAndRef(name)
			if err != nil {
				return err
			}
			if err := ps.push(repoPath, tag, p); err != nil {
				return fmt.Errorf("push %s: %w", name, err)
			}
			listing = append(listing, fmt.Sprintf("%s\t%s\t%s", name, p.Top().Digest, img.Doc))
		}
	}
	reg.stop()
	logf("pushed %d names, uploaded %.1f MB", len(listing), float64(ps.Uploaded)/1e6)

	list := "# name\tmanifest digest\twhat it is (written by critest/images/cmd/mkimages)\n" + strings.Join(listing, "\n") + "\n"
	if err := writeAtomic(filepath.Join(storage, listFile), []byte(list)); err != nil {
		return err
	}
	return writeAtomic(stamp, []byte(key+"\n"))
}

// readAgnhost reads the agnhost binary at path and porter's test certificate and
// key that hack/tools.sh e2e puts beside it (agnhost-porter/localhost.crt, .key),
// by their paths in the image, and its version (agnhost.version, the image's tag);
// nil when there is no agnhost.
func readAgnhost(path string) (map[string][]byte, string, error) {
	bin, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", err
	}
	files := map[string][]byte{"agnhost": bin}
	for _, n := range []string{"localhost.crt", "localhost.key"} {
		b, err := os.ReadFile(filepath.Join(filepath.Dir(path), "agnhost-porter", n))
		if err != nil {
			return nil, "", fmt.Errorf("agnhost's test certificate (run hack/tools.sh e2e again): %w", err)
		}
		files[n] = b
	}
	v, err := os.ReadFile(filepath.Join(filepath.Dir(path), "agnhost.version"))
	if err != nil {
		return nil, "", fmt.Errorf("agnhost's version (run hack/tools.sh e2e again): %w", err)
	}
	tag := strings.TrimSpace(string(v))
	if tag == "" || strings.ContainsAny(tag, " \t\n:/@") {
		return nil, "", fmt.Errorf("agnhost.version beside %s: %q is not an image tag", path, v)
	}
	return files, tag, nil
}

func sortedKeys(m map[string][]byte) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// sourceKey hashes what the image set is built from: every file under
// critest/images except docs and tests, the busybox build key, the Go
// version (compress/flate and the helpers' code come from it) and this
// program's format version.
func sourceKey(dir, busyboxKey string) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n%s\n", formatVersion, busyboxKey, runtime.Version())
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() && !strings.HasSuffix(p, ".md") && !strings.HasSuffix(p, "_test.go") {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	sort.Strings(files)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		rel, _ := filepath.Rel(dir, f)
		sum := sha256.Sum256(b)
		fmt.Fprintf(h, "%s %x\n", rel, sum)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// repoRoot walks up from the working directory to shimd's go.mod.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(string(b), "module github.com/shimd/shimd\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("run mkimages inside the shimd repository")
		}
		dir = parent
	}
}

// lock takes an exclusive flock on path, waiting for another mkimages.
func lock(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}

func writeAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func isFlagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func jobs() int { return runtime.NumCPU() }
