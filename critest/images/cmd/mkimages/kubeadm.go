package main

import (
	"archive/tar"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// The kubeadm image set (issue 47): every image "kubeadm config images list"
// names for Kubernetes v1.37.2, plus the pod network's (flannel), made from the
// static binaries hack/tools.sh kubeadm caches beside the release's kubelet and
// from Debian's iptables. It is pushed into a storage of its own
// (defaultKubeadmStorage), apart from the test image set: it is ~600 MB of
// binaries that only the kubeadm cluster pulls.

const defaultKubeadmStorage = "/var/cache/shimd/registry-kubeadm"

// kubeImage is one image of the set made from one cached binary.
type kubeImage struct {
	name   string   // upstream reference
	binary string   // file name in the tools' bin dir
	path   string   // where it goes in the image
	cmd    []string // the image's Entrypoint
	// iptables: Debian's iptables (nft backend) with its libraries and
	// extensions go in too (kube-proxy and flanneld run iptables).
	iptables bool
	// busybox: on the busybox base (a shell for the flannel DaemonSet's
	// CNI-config script); otherwise on the bare skeleton, as upstream's
	// distroless images.
	busybox bool
}

// kubeImages are the set for Kubernetes release tag k8s (v1.37.2), etcd etcdTag
// (3.7.0-0), CoreDNS dnsTag (v1.14.6) and flannel flannelTag (v0.28.10).
func kubeImages(k8s, etcdTag, dnsTag, flannelTag string) []kubeImage {
	r := "registry.k8s.io/"
	return []kubeImage{
		{name: r + "kube-apiserver:" + k8s, binary: "kube-apiserver", path: "usr/local/bin/kube-apiserver"},
		{name: r + "kube-controller-manager:" + k8s, binary: "kube-controller-manager", path: "usr/local/bin/kube-controller-manager"},
		{name: r + "kube-scheduler:" + k8s, binary: "kube-scheduler", path: "usr/local/bin/kube-scheduler"},
		{name: r + "kube-proxy:" + k8s, binary: "kube-proxy", path: "usr/local/bin/kube-proxy", iptables: true},
		{name: r + "etcd:" + etcdTag, binary: "etcd", path: "usr/local/bin/etcd"},
		{name: r + "coredns/coredns:" + dnsTag, binary: "coredns", path: "coredns", cmd: []string{"/coredns"}},
		{name: "ghcr.io/flannel-io/flannel:" + flannelTag, binary: "flanneld", path: "opt/bin/flanneld",
			cmd: []string{"/opt/bin/flanneld"}, iptables: true, busybox: true},
	}
}

// kubeadmConfig is what buildKubeadm needs.
type kubeadmConfig struct {
	storage, cache, bin string // bin: the release's tools directory
	force               bool
}

// buildKubeadm builds and pushes the kubeadm image set unless the stamp (a hash
// of every binary and library that goes in, and of this file) is current.
func buildKubeadm(cfg kubeadmConfig, logf func(string, ...any)) error {
	repo, err := repoRoot()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(cfg.storage, 0o755); err != nil {
		return err
	}
	unlock, err := lock(cfg.storage + ".lock")
	if err != nil {
		return err
	}
	defer unlock()
	tags, err := kubeTags(cfg.bin)
	if err != nil {
		return err
	}
	set := kubeImages(tags[0], tags[1], tags[2], tags[3])
	ipt, err := iptablesEntries()
	if err != nil {
		return err
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s kubeadm\n%v\n", formatVersion, tags)
	src, err := os.ReadFile(filepath.Join(repo, "critest/images/cmd/mkimages/kubeadm.go"))
	if err != nil {
		return err
	}
	fmt.Fprintf(h, "%x\n", sha256.Sum256(src))
	for _, e := range ipt {
		fmt.Fprintf(h, "%s %c %s %x\n", e.Path, e.Type, e.Link, sha256.Sum256(e.Data))
	}
	for _, k := range set {
		f, err := os.Open(filepath.Join(cfg.bin, k.binary))
		if err != nil {
			return fmt.Errorf("%w (hack/tools.sh kubeadm builds it)", err)
		}
		fi, err := f.Stat()
		f.Close()
		if err != nil {
			return err
		}
		// Size and time: hashing 600 MB on every test run costs seconds.
		fmt.Fprintf(h, "%s %d %d\n", k.binary, fi.Size(), fi.ModTime().UnixNano())
	}
	bbKey, err := busyboxKey()
	if err != nil {
		return err
	}
	fmt.Fprintf(h, "%s\n", bbKey)
	key := fmt.Sprintf("%x", h.Sum(nil))
	stamp := filepath.Join(cfg.storage, stampFile)
	if old, _ := os.ReadFile(stamp); !cfg.force && strings.TrimSpace(string(old)) == key {
		logf("%s is up to date (stamp %s)", cfg.storage, key[:16])
		return nil
	}
	base, err := kubeBases(cfg.cache, logf)
	if err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "shimd-mkimages-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	reg, err := startRegistry(cfg.storage, work)
	if err != nil {
		return err
	}
	defer reg.stop()
	ps := newPusher(reg.URL)
	var listing []string
	var b builder
	iptLayer := b.layer("iptables 1.8.9 (Debian 12, nf_tables backend) with its libraries and extensions", ipt)
	for _, k := range set {
		data, err := os.ReadFile(filepath.Join(cfg.bin, k.binary))
		if err != nil {
			return err
		}
		layers := base.skel
		if k.busybox {
			layers = base.busybox
		}
		layers = append([]*layer{}, layers...)
		if k.iptables {
			layers = append(layers, iptLayer)
		}
		layers = append(layers, b.layer(k.binary+" (hack/tools.sh kubeadm)", []entry{file(k.path, 0o755, data)}))
		if b.err != nil {
			return b.err
		}
		img := &image{Names: []string{k.name}, Doc: k.binary + " from " + cfg.bin, Layers: layers, Format: dockerV2List,
			Config: ocispec.ImageConfig{Env: []string{pathEnv}, Entrypoint: k.cmd}}
		p, err := render(img)
		if err != nil {
			return err
		}
		repoPath, tag, err := repoAndRef(k.name)
		if err != nil {
			return err
		}
		if err := ps.push(repoPath, tag, p); err != nil {
			return fmt.Errorf("push %s: %w", k.name, err)
		}
		logf("pushed %s", k.name)
		listing = append(listing, fmt.Sprintf("%s\t%s\t%s", k.name, p.Top().Digest, img.Doc))
	}
	reg.stop()
	list := "# name\tmanifest digest\twhat it is (written by critest/images/cmd/mkimages -kubeadm)\n" + strings.Join(listing, "\n") + "\n"
	if err := writeAtomic(filepath.Join(cfg.storage, listFile), []byte(list)); err != nil {
		return err
	}
	return writeAtomic(stamp, []byte(key+"\n"))
}

// kubeTags reads the versions: the release from the directory name
// (k8s-v1.37.2), etcd from etcd.version ("v3.7.0" -> kubeadm's "3.7.0-0"),
// CoreDNS and flannel from what the binaries print.
func kubeTags(bin string) ([4]string, error) {
	var t [4]string
	t[0] = strings.TrimPrefix(filepath.Base(bin), "k8s-")
	ev, err := os.ReadFile(filepath.Join(bin, "etcd.version"))
	if err != nil {
		return t, fmt.Errorf("%w (hack/tools.sh cluster)", err)
	}
	t[1] = strings.TrimPrefix(strings.TrimSpace(string(ev)), "v") + "-0"
	out, err := exec.Command(filepath.Join(bin, "coredns"), "-version").Output()
	if err != nil {
		return t, fmt.Errorf("coredns -version: %w (hack/tools.sh kubeadm)", err)
	}
	for _, f := range strings.Fields(string(out)) {
		if v, ok := strings.CutPrefix(f, "CoreDNS-"); ok {
			t[2] = "v" + v
		}
	}
	out, err = exec.Command(filepath.Join(bin, "flanneld"), "--version").CombinedOutput()
	if err != nil {
		return t, fmt.Errorf("flanneld --version: %w (hack/tools.sh kubeadm)", err)
	}
	t[3] = strings.TrimSpace(string(out))
	if !strings.HasPrefix(t[0], "v") || t[2] == "" || !strings.HasPrefix(t[3], "v") {
		return t, fmt.Errorf("versions of the kubeadm image set: %q", t)
	}
	return t, nil
}

type kubeBase struct{ skel, busybox []*layer }

// kubeBases are the skeleton (/etc/passwd, /etc/group, /tmp) and the busybox
// base of the test image set.
func kubeBases(cache string, logf func(string, ...any)) (kubeBase, error) {
	bb, err := busybox(cache, logf)
	if err != nil {
		return kubeBase{}, err
	}
	in := inputs{}
	if in.Busybox, err = os.ReadFile(bb); err != nil {
		return kubeBase{}, err
	}
	if in.Applets, err = busyboxApplets(bb); err != nil {
		return kubeBase{}, err
	}
	var b builder
	skel := b.layer("image skeleton: /etc/passwd, /etc/group, /tmp, /root", []entry{
		file("etc/passwd", 0o644, []byte(passwd)), file("etc/group", 0o644, []byte(group)),
		dir("dev", 0o755), dir("proc", 0o755), dir("root", 0o700), dir("sys", 0o755), dir("tmp", 0o1777),
	})
	es := []entry{file("bin/busybox", 0o755, in.Busybox)}
	for _, a := range in.Applets {
		if a != "busybox" {
			es = append(es, hardlink("bin/"+a, "bin/busybox"))
		}
	}
	applets := b.layer("busybox 1.35.0 (Debian source 1.35.0-4+deb12u1), defconfig, static; applets hard-linked in /bin", es)
	return kubeBase{skel: []*layer{skel}, busybox: []*layer{skel, applets}}, b.err
}

// iptablesEntries are Debian's xtables-nft-multi as iptables, iptables-save,
// iptables-restore and their ip6tables twins (hard links in /usr/sbin), every
// xtables extension, and the shared libraries they load (ldd), at their real
// paths under /usr with /lib and /lib64 as links, as on Debian 12.
func iptablesEntries() ([]entry, error) {
	const multi = "/usr/sbin/xtables-nft-multi"
	exts, err := filepath.Glob("/usr/lib/x86_64-linux-gnu/xtables/*.so")
	if err != nil || len(exts) == 0 {
		return nil, fmt.Errorf("no iptables extensions in /usr/lib/x86_64-linux-gnu/xtables (apt-get install iptables): %v", err)
	}
	files := map[string]bool{multi: true}
	for _, e := range exts {
		files[e] = true
	}
	for _, f := range append([]string{multi}, exts...) {
		libs, err := lddLibs(f)
		if err != nil {
			return nil, err
		}
		for _, l := range libs {
			files[l] = true
		}
	}
	var out []entry
	seen := map[string]bool{}
	add := func(e entry) {
		if !seen[e.Path] {
			seen[e.Path] = true
			out = append(out, e)
		}
	}
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			return nil, err
		}
		data, err := os.ReadFile(real)
		if err != nil {
			return nil, err
		}
		rel := strings.TrimPrefix(usrPath(real), "/")
		add(file(rel, 0o755, data))
		if base := filepath.Base(p); base != filepath.Base(real) {
			add(entry{Path: filepath.Join(filepath.Dir(rel), base), Type: tar.TypeSymlink, Link: filepath.Base(real)})
		}
	}
	// ld.so is asked for by /lib64/ld-linux-x86-64.so.2.
	out = append(out,
		entry{Path: "lib", Type: tar.TypeSymlink, Link: "usr/lib"}, entry{Path: "lib64", Type: tar.TypeSymlink, Link: "usr/lib64"},
		entry{Path: "usr/lib64/ld-linux-x86-64.so.2", Type: tar.TypeSymlink, Link: "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"})
	for _, n := range []string{"iptables", "iptables-save", "iptables-restore", "ip6tables", "ip6tables-save", "ip6tables-restore"} {
		out = append(out, hardlink("usr/sbin/"+n, "usr/sbin/xtables-nft-multi"))
	}
	if b, err := os.ReadFile("/etc/protocols"); err == nil {
		out = append(out, file("etc/protocols", 0o644, b))
	}
	return out, nil
}

// usrPath maps /lib/... to /usr/lib/... (Debian 12 is merged-/usr).
func usrPath(p string) string {
	for _, d := range []string{"/lib/", "/lib64/", "/sbin/", "/bin/"} {
		if strings.HasPrefix(p, d) {
			return "/usr" + p
		}
	}
	return p
}

// lddLibs are the absolute paths ldd lists for a binary or library.
func lddLibs(path string) ([]string, error) {
	out, err := exec.Command("ldd", path).Output()
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w", path, err)
	}
	var libs []string
	for _, line := range strings.Split(string(out), "\n") {
		for _, f := range strings.Fields(line) {
			if strings.HasPrefix(f, "/") {
				libs = append(libs, f)
			}
		}
	}
	return libs, nil
}
