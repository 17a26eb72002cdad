package main

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path"

	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// inputs are the binaries the images are made of.
type inputs struct {
	Busybox []byte            // static busybox
	Applets []string          // its applet names (busybox --list)
	Helpers map[string][]byte // by name: nginx, httpd, nonewprivs, pause, curl
	// Agnhost holds the agnhost binary of the Kubernetes release of the e2e tests
	// ("agnhost") and porter's test certificate ("localhost.crt", "localhost.key"),
	// from hack/tools.sh e2e; nil leaves the agnhost image out of the set.
	Agnhost map[string][]byte
	// AgnhostTag is that agnhost's version (agnhost.version beside the binary: the
	// release's test/images/agnhost/VERSION, the tag its e2e tests pull).
	AgnhostTag string
	// SampleAPIServer is k8s.io/sample-apiserver of the release (hack/tools.sh
	// sample-apiserver), for the conformance set; nil leaves its image out.
	SampleAPIServer []byte
}

const (
	e2e = "registry.k8s.io/e2e-test-images/"
	cri = "gcr.io/k8s-staging-cri-tools/"

	pathEnv = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)

// passwd and group are those of the official busybox image.
const passwd = `root:x:0:0:root:/root:/bin/sh
daemon:x:1:1:daemon:/usr/sbin:/bin/false
bin:x:2:2:bin:/bin:/bin/false
sys:x:3:3:sys:/dev:/bin/false
sync:x:4:100:sync:/bin:/bin/sync
mail:x:8:8:mail:/var/spool/mail:/bin/false
www-data:x:33:33:www-data:/var/www:/bin/false
operator:x:37:37:Operator:/var:/bin/false
nobody:x:65534:65534:nobody:/home:/bin/false
`

const group = `root:x:0:
daemon:x:1:
bin:x:2:
sys:x:3:
adm:x:4:
tty:x:5:
disk:x:6:
lp:x:7:
mail:x:8:
kmem:x:9:
wheel:x:10:root
cdrom:x:11:
dialout:x:18:
floppy:x:19:
video:x:28:
audio:x:29:
tape:x:32:
www-data:x:33:
operator:x:37:
utmp:x:43:
plugdev:x:46:
staff:x:50:
lock:x:54:
netdev:x:82:
users:x:100:
nogroup:x:65534:
`

// catalog is the whole image set. Every image is distinct (its own ID)
// except where one image carries several names on purpose.
func catalog(in inputs) ([]*image, error) {
	var b builder
	skel := b.layer("busybox image skeleton: /etc/passwd, /etc/group, /tmp, /root", []entry{
		file("etc/passwd", 0o644, []byte(passwd)), file("etc/group", 0o644, []byte(group)),
		dir("bin", 0o755), dir("dev", 0o755), dir("home", 0o755), dir("proc", 0o755), dir("root", 0o700),
		dir("sys", 0o755), dir("tmp", 0o1777), dir("usr/sbin", 0o755), dir("var/spool/mail", 0o755), dir("var/www", 0o755),
	})
	bbEntries := []entry{file("bin/busybox", 0o755, in.Busybox)}
	for _, a := range in.Applets {
		if a != "busybox" {
			bbEntries = append(bbEntries, hardlink("bin/"+a, "bin/busybox"))
		}
	}
	applets := b.layer("busybox 1.35.0 (Debian source 1.35.0-4+deb12u1), defconfig, static; applets hard-linked in /bin", bbEntries)
	base := []*layer{skel, applets}
	with := func(ls ...*layer) []*layer { return append(append([]*layer{}, base...), ls...) }
	sh := ocispec.ImageConfig{Env: []string{pathEnv}, Cmd: []string{"sh"}}
	marker := func(p string) *layer { return b.layer("marker file /"+p, []entry{file(p, 0o644, nil)}) }

	imgs := []*image{
		{Names: []string{e2e + "busybox:1.29-2", e2e + "busybox:1.37.0-1", e2e + "busybox:1.37.0-2"},
			Doc:    "busybox: critest's default container image and the Kubernetes e2e tests' (v1.34: 1.37.0-1, v1.37: 1.37.0-2)",
			Layers: base, Config: sh, Format: dockerV2List},
		{Names: []string{e2e + "glibc-dns-testing:2.1.1"},
			Doc: "glibc-dns-testing: busybox with the dig and getent stand-in (critest/images/cmd/dig) the e2e DNS tests' probes run; " +
				"its [NodeConformance] use (v1.37) is sh, hostname and hostname -f through /etc/hosts",
			Layers: with(digLayer(&b, in)), Config: sh, Format: dockerV2List},
		{Names: []string{"docker.io/library/busybox:latest", "docker.io/library/busybox:1.36"},
			Doc: "busybox for shimd's own tests: one image, two tags", Layers: base, Config: sh, Format: ociIndex},
	}
	for _, tag := range []string{"1.35.0-glibc", "1-uclibc", "1", "1-glibc", "1-musl"} {
		imgs = append(imgs, &image{Names: []string{"public.ecr.aws/docker/library/busybox:" + tag},
			Doc: "busybox for critest's image benchmarks (five distinct images)", Layers: base, Config: sh, Format: ociIndex})
	}

	// Web servers.
	nginxBin := b.layer("nginx stand-in (critest/images/cmd/nginx)", []entry{
		file("usr/sbin/nginx", 0o755, in.Helpers["nginx"]),
		file("usr/share/nginx/html/index.html", 0o644, []byte(nginxIndex)),
		dir("var/run", 0o755), dir("var/log/nginx", 0o755), dir("var/cache/nginx", 0o755),
	})
	nginxConf := func(port int) *layer {
		return b.layer(fmt.Sprintf("nginx default.conf: listen %d", port), []entry{
			file("etc/nginx/conf.d/default.conf", 0o644, []byte(fmt.Sprintf(nginxConfTmpl, port)))})
	}
	nginxCfg := func(stop string) ocispec.ImageConfig {
		return ocispec.ImageConfig{Env: []string{pathEnv}, Cmd: []string{"nginx", "-g", "daemon off;"},
			ExposedPorts: map[string]struct{}{"80/tcp": {}}, StopSignal: stop}
	}
	httpd := b.layer("httpd stand-in (critest/images/cmd/httpd)", []entry{
		file("usr/local/apache2/bin/httpd", 0o755, in.Helpers["httpd"]),
		file("usr/local/apache2/htdocs/index.html", 0o644, []byte("<html><body><h1>It works!</h1></body></html>\n")),
		dir("usr/local/apache2/logs", 0o755),
		file("usr/local/bin/httpd-foreground", 0o755, []byte(httpdForeground)),
	})
	imgs = append(imgs,
		&image{Names: []string{e2e + "nginx:1.14-2", e2e + "nginx:1.14-4", e2e + "nginx:1.27.0-2"},
			Doc:    "nginx stand-in: HTTP 200 on :80, /var/run/nginx.pid, 'nginx: master process' (critest; e2e tests v1.34: 1.14-4, v1.37: 1.27.0-2)",
			Layers: with(nginxBin, nginxConf(80)), Config: nginxCfg(""), Format: dockerV2List},
		&image{Names: []string{cri + "hostnet-nginx-amd64"}, Doc: "the nginx stand-in listening on :12003 (for host-network pods)",
			Layers: with(nginxBin, nginxConf(12003)), Config: nginxCfg("SIGQUIT"), Format: dockerV2List},
		&image{Names: []string{e2e + "httpd:2.4.39-4", e2e + "httpd:2.4.38-4"}, Doc: "httpd stand-in: HTTP 200 on :80, logs 'httpd'; StopSignal SIGWINCH",
			Layers: with(httpd), Format: dockerV2List, Config: ocispec.ImageConfig{
				Env:        []string{"PATH=/usr/local/apache2/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HTTPD_PREFIX=/usr/local/apache2"},
				Cmd:        []string{"httpd-foreground"},
				WorkingDir: "/usr/local/apache2", ExposedPorts: map[string]struct{}{"80/tcp": {}}, StopSignal: "SIGWINCH"}},
		&image{Names: []string{e2e + "nonewprivs:1.3", e2e + "nonewprivs:1.4"}, Doc: "setuid-root /usr/local/bin/nnp printing 'Effective uid: N' (critest, e2e v1.34: 1.3; e2e v1.37: 1.4)",
			Format: dockerV2List, Layers: with(b.layer("nnp stand-in, setuid root (critest/images/cmd/nonewprivs)", []entry{
				file("usr/local/bin/nnp", 0o4755, in.Helpers["nonewprivs"])})),
			Config: ocispec.ImageConfig{Env: []string{pathEnv}, Entrypoint: []string{"/usr/local/bin/nnp"}}},
		&image{Names: []string{e2e + "nonroot:1.4", e2e + "nonroot:1.5"}, Doc: "busybox with image config User 1234 (the e2e tests' runAsNonRoot image; v1.34: 1.4, v1.37: 1.5)",
			Layers: base, Config: ocispec.ImageConfig{Env: []string{pathEnv}, Cmd: []string{"sh"}, User: "1234"}, Format: dockerV2List},
	)
	if in.Agnhost != nil {
		imgs = append(imgs, agnhostImage(&b, in, with))
	}

	// cri-tools' image specs: busybox plus a marker file, as upstream's
	// images/image-test/Dockerfile (ADD ${TEST} ${TEST}).
	for _, n := range []string{"test-image-1", "test-image-2", "test-image-3", "test-image-latest"} {
		imgs = append(imgs, &image{Names: []string{cri + n + ":latest"}, Doc: "busybox + /" + n,
			Layers: with(marker(n)), Config: sh, Format: dockerV2List})
	}
	imgs = append(imgs,
		&image{Names: []string{cri + "test-image-tags:1", cri + "test-image-tags:2", cri + "test-image-tags:3"},
			Doc: "busybox + /same-image: one image, three tags", Layers: with(marker("same-image")), Config: sh, Format: dockerV2List},
		&image{Names: []string{cri + "test-image-tag:test"}, Doc: "busybox + /test",
			Layers: with(marker("test")), Config: sh, Format: dockerV2List},
		&image{Names: []string{cri + "test-image-tag:all"}, Doc: "busybox + /all",
			Layers: with(marker("all")), Config: sh, Format: dockerV2List},
	)
	for _, u := range [][2]string{{"uid", "1002"}, {"username", "www-data"}, {"uid-group", "1003:1004"}, {"username-group", "www-data:1004"}} {
		imgs = append(imgs, &image{Names: []string{cri + "test-image-user-" + u[0]}, Doc: "busybox with image config User " + u[1],
			Layers: base, Config: ocispec.ImageConfig{Env: []string{pathEnv}, Cmd: []string{"sh"}, User: u[1]}, Format: dockerV2List})
	}
	imgs = append(imgs, &image{Names: []string{cri + "test-image-predefined-group"},
		Doc: "busybox, User 1000 (default-user), member of group-defined-in-image (50000) in /etc/group",
		Layers: with(b.layer("adduser -u 1000 default-user; addgroup -g 50000 group-defined-in-image; addgroup default-user group-defined-in-image", []entry{
			file("etc/passwd", 0o644, []byte(passwd+"default-user:x:1000:1000:Linux User,,,:/home/default-user:/bin/sh\n")),
			file("etc/group", 0o644, []byte(group+"default-user:x:1000:\ngroup-defined-in-image:x:50000:default-user\n")),
			{Path: "home/default-user", Type: tar.TypeDir, Mode: 0o755, UID: 1000, GID: 1000},
		})),
		Config: ocispec.ImageConfig{Env: []string{pathEnv}, Cmd: []string{"sh"}, User: "1000"}, Format: dockerV2List})

	// Pause images: the two 3.9 names are one image (critest's "same image
	// from different registries" spec); every tag is a distinct image.
	pause := b.layer("pause (sandbox/pause/pause.bin, shimd's own pause program)", []entry{file("pause", 0o755, in.Helpers["pause"])})
	pauseCfg := ocispec.ImageConfig{Entrypoint: []string{"/pause"}, User: "65535:65535"}
	imgs = append(imgs,
		&image{Names: []string{"registry.k8s.io/pause:3.9", "k8s.gcr.io/pause:3.9"}, Doc: "pause (critest); identical under both names",
			Layers: []*layer{pause}, Config: pauseCfg, Format: dockerV2List},
		&image{Names: []string{"registry.k8s.io/pause:3.10"}, Doc: "pause: the harness's sandbox image for containerd's CRI plugin",
			Layers: []*layer{pause}, Config: pauseCfg, Format: ociIndex},
		&image{Names: []string{"registry.k8s.io/pause:3.10.2"}, Doc: "pause: containerd 2.4's default sandbox image and the Kubernetes v1.37 e2e tests' pause image",
			Layers: []*layer{pause}, Config: pauseCfg, Format: ociIndex},
		&image{Names: []string{"registry.k8s.io/pause:3.10.1"}, Doc: "pause: the Kubernetes v1.34 e2e tests' pause image",
			Layers: []*layer{pause}, Config: pauseCfg, Format: dockerV2List},
		&image{Names: []string{"registry.k8s.io/pause:3.6"}, Doc: "pause: containerd 1.6's default sandbox image",
			Layers: []*layer{pause}, Config: pauseCfg, Format: dockerV2List},
	)

	// Pull benchmark: busybox + four layers of pseudo-random data.
	bench := append([]*layer{}, base...)
	for i := 1; i <= 4; i++ {
		bench = append(bench, b.layer(fmt.Sprintf("bench data %d/4: 48 x 256 KiB from a fixed seed", i), benchData(i)))
	}
	imgs = append(imgs, &image{Names: []string{"docker.io/shimd/bench:50mb"},
		Doc: "pull benchmark: ~50 MB in 6 layers (busybox + 4 x 12.6 MB incompressible)", Layers: bench, Config: sh, Format: ociManifest})
	return imgs, b.err
}

// agnhostImage is registry.k8s.io/e2e-test-images/agnhost:<AgnhostTag> (2.66.1 for
// Kubernetes v1.37.2) as upstream's Dockerfile makes it (test/images/agnhost), on the
// busybox base instead of Alpine: the real /agnhost of the release (hack/tools.sh e2e), /agnhost-2 (a link
// the entrypoint tests call), /uploads, porter's /localhost.crt and /localhost.key, the user-defined-in-image user (1000) in
// group-defined-in-image (50000), and of Alpine's tools the ones e2e tests run in
// agnhost pods: curl (the cmd/curl stand-in), OpenBSD's nc (the cmd/nc stand-in,
// before busybox's in PATH), dig and getent (cmd/dig), sh and /bin/bash (a script
// running busybox sh). Entrypoint /agnhost, Cmd pause.
func agnhostImage(b *builder, in inputs, with func(...*layer) []*layer) *image {
	bin := b.layer("agnhost "+in.AgnhostTag+" (k8s.io/kubernetes/test/images/agnhost, hack/tools.sh e2e), /agnhost-2, /uploads", []entry{
		file("agnhost", 0o755, in.Agnhost["agnhost"]), hardlink("agnhost-2", "agnhost"), dir("uploads", 0o755),
		file("localhost.crt", 0o644, in.Agnhost["localhost.crt"]), file("localhost.key", 0o600, in.Agnhost["localhost.key"]),
	})
	tools := b.layer("curl and nc stand-ins (critest/images/cmd/curl, cmd/nc), /bin/bash running busybox sh, user-defined-in-image", []entry{
		file("usr/bin/curl", 0o755, in.Helpers["curl"]), file("usr/bin/nc", 0o755, in.Helpers["nc"]),
		file("bin/bash", 0o755, []byte("#!/bin/sh\n# shimd's offline agnhost image has no bash: busybox sh runs the script.\nexec /bin/sh \"$@\"\n")),
		file("etc/passwd", 0o644, []byte(passwd+"user-defined-in-image:x:1000:1000:Linux User,,,:/home/user-defined-in-image:/bin/sh\n")),
		file("etc/group", 0o644, []byte(group+"user-defined-in-image:x:1000:\ngroup-defined-in-image:x:50000:user-defined-in-image\n")),
		{Path: "home/user-defined-in-image", Type: tar.TypeDir, Mode: 0o755, UID: 1000, GID: 1000},
	})
	registry := b.layer("fake-registry-server's /var/registry: pause:testing (the pause images' program), as upstream's prepare_registry.sh lays out pause 3.10.2",
		fakeRegistry(b, in.Helpers["pause"]))
	return &image{Names: []string{e2e + "agnhost:" + in.AgnhostTag}, Doc: "agnhost " + in.AgnhostTag + ": the real /agnhost on busybox, with curl, nc, dig and getent stand-ins, bash as busybox sh and fake-registry-server's pause:testing",
		Layers: with(bin, tools, digLayer(b, in), registry), Format: dockerV2List, Config: ocispec.ImageConfig{
			Env: []string{pathEnv}, Entrypoint: []string{"/agnhost"}, Cmd: []string{"pause"},
			ExposedPorts: map[string]struct{}{"80/tcp": {}, "8080/tcp": {}, "8081/tcp": {}, "9376/tcp": {}, "5000/tcp": {}}}}
}

// digLayer holds the dig and getent stand-in (critest/images/cmd/dig) as
// /usr/bin/dig and /usr/bin/getent: the e2e DNS tests' probes run "dig +search
// NAME" and "getent hosts NAME" in agnhost (Alpine's bind-tools upstream) and in
// glibc-dns-testing.
func digLayer(b *builder, in inputs) *layer {
	return b.layer("dig and getent stand-in (critest/images/cmd/dig)", []entry{
		file("usr/bin/dig", 0o755, in.Helpers["dig"]), hardlink("usr/bin/getent", "usr/bin/dig")})
}

// fakeRegistry is the /var/registry tree that agnhost's fake-registry-server serves
// (the Kubernetes e2e tests' private-registry pulls: localhost:5000/pause:testing), in
// the layout of upstream's test/images/agnhost/fakeregistryserver/prepare_registry.sh:
// pause/manifests/testing holds the manifest's digest, manifests and blobs lie at
// <dir>/sha256/<first two hex>/<hex>/data. The image holds the pause images' program, one OCI
// manifest (upstream keeps an index of the release's platforms).
func fakeRegistry(b *builder, pause []byte) []entry {
	l := b.layer("pause", []entry{file("pause", 0o755, pause)})
	cfg, err := json.Marshal(ocispec.Image{
		Created: &epoch, Platform: ocispec.Platform{OS: "linux", Architecture: "amd64"},
		Config: ocispec.ImageConfig{Entrypoint: []string{"/pause"}, User: "65535:65535"},
		RootFS: ocispec.RootFS{Type: "layers", DiffIDs: []digest.Digest{l.DiffID}},
	})
	if err != nil && b.err == nil {
		b.err = err
	}
	man, err := json.Marshal(ocispec.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageManifest,
		Config: ocispec.Descriptor{MediaType: ocispec.MediaTypeImageConfig, Digest: digest.FromBytes(cfg), Size: int64(len(cfg))},
		Layers: []ocispec.Descriptor{{MediaType: ocispec.MediaTypeImageLayerGzip, Digest: l.Digest, Size: int64(len(l.Blob))}},
	})
	if err != nil && b.err == nil {
		b.err = err
	}
	at := func(kind string, d digest.Digest) string {
		return path.Join("var/registry/pause", kind, d.Algorithm().String(), d.Encoded()[:2], d.Encoded(), "data")
	}
	md := digest.FromBytes(man)
	return []entry{
		file("var/registry/pause/manifests/testing", 0o644, []byte(md.String()+"\n")),
		file(at("manifests", md), 0o644, man),
		file(at("blobs", digest.FromBytes(cfg)), 0o644, cfg),
		file(at("blobs", l.Digest), 0o644, l.Blob),
	}
}

// benchData is layer i of the bench image: incompressible bytes from
// ChaCha8 seeded with the layer number, so every build is identical.
func benchData(i int) []entry {
	rng := rand.NewChaCha8(sha256.Sum256([]byte(fmt.Sprintf("shimd bench layer %d", i))))
	var es []entry
	for f := 0; f < 48; f++ {
		data := make([]byte, 256<<10)
		_, _ = rng.Read(data)
		es = append(es, file(fmt.Sprintf("bench/layer%d/blob%02d", i, f), 0o644, data))
	}
	return es
}

// builder makes layers and keeps the first error.
type builder struct{ err error }

func (b *builder) layer(comment string, es []entry) *layer {
	l, err := buildLayer(comment, es)
	if err != nil && b.err == nil {
		b.err = err
	}
	if l == nil {
		l = &layer{}
	}
	return l
}

const nginxConfTmpl = `server {
    listen       %d;
    server_name  localhost;

    location / {
        root   /usr/share/nginx/html;
        index  index.html index.htm;
    }
}
`

const nginxIndex = `<!DOCTYPE html>
<html>
<head><title>Welcome to nginx!</title></head>
<body>
<h1>Welcome to nginx!</h1>
<p>This is shimd's offline stand-in for the nginx test image.</p>
</body>
</html>
`

const httpdForeground = `#!/bin/sh
set -e
# As the httpd image's script: remove a stale PID file, then run in the foreground.
rm -f /usr/local/apache2/logs/httpd.pid
exec httpd -DFOREGROUND "$@"
`
