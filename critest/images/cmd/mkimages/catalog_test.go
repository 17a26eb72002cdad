package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/stretchr/testify/require"
)

// critestImages are the names critest v1.37.0 (as v1.36.0) pulls (pkg/validate,
// pkg/framework, pkg/benchmark), except the upstream-digest image.
var critestImages = []string{
	"registry.k8s.io/e2e-test-images/busybox:1.29-2",
	"registry.k8s.io/e2e-test-images/nginx:1.14-2",
	"registry.k8s.io/e2e-test-images/httpd:2.4.39-4",
	"registry.k8s.io/e2e-test-images/nonewprivs:1.3",
	"gcr.io/k8s-staging-cri-tools/hostnet-nginx-amd64",
	"gcr.io/k8s-staging-cri-tools/test-image-latest:latest",
	"gcr.io/k8s-staging-cri-tools/test-image-tag:test",
	"gcr.io/k8s-staging-cri-tools/test-image-tag:all",
	"gcr.io/k8s-staging-cri-tools/test-image-1:latest",
	"gcr.io/k8s-staging-cri-tools/test-image-2:latest",
	"gcr.io/k8s-staging-cri-tools/test-image-3:latest",
	"gcr.io/k8s-staging-cri-tools/test-image-tags:1",
	"gcr.io/k8s-staging-cri-tools/test-image-tags:2",
	"gcr.io/k8s-staging-cri-tools/test-image-tags:3",
	"gcr.io/k8s-staging-cri-tools/test-image-user-uid",
	"gcr.io/k8s-staging-cri-tools/test-image-user-username",
	"gcr.io/k8s-staging-cri-tools/test-image-user-uid-group",
	"gcr.io/k8s-staging-cri-tools/test-image-user-username-group",
	"gcr.io/k8s-staging-cri-tools/test-image-predefined-group",
	"registry.k8s.io/pause:3.9",
	"k8s.gcr.io/pause:3.9",
	"public.ecr.aws/docker/library/busybox:1.35.0-glibc",
	"public.ecr.aws/docker/library/busybox:1-uclibc",
	"public.ecr.aws/docker/library/busybox:1",
	"public.ecr.aws/docker/library/busybox:1-glibc",
	"public.ecr.aws/docker/library/busybox:1-musl",
}

// nodeE2EImages are the names the [NodeConformance] tests of Kubernetes v1.37.2's
// test/e2e pull (test/utils/image/manifest.go: Agnhost, BusyBox, GlibcDnsTesting,
// Nginx, NonRoot, Nonewprivs, Pause; InvalidRegistryImage must fail), by their
// upstream names; the node conformance run remaps them to the local registry
// (critest/cluster). agnhost's tag is the fake agnhost.version of fakeInputs.
var nodeE2EImages = []string{
	"registry.k8s.io/e2e-test-images/agnhost:2.66.1",
	"registry.k8s.io/e2e-test-images/busybox:1.37.0-2",
	"registry.k8s.io/e2e-test-images/glibc-dns-testing:2.1.1",
	"registry.k8s.io/e2e-test-images/nginx:1.27.0-2",
	"registry.k8s.io/e2e-test-images/nonroot:1.5",
	"registry.k8s.io/e2e-test-images/nonewprivs:1.4",
	"registry.k8s.io/pause:3.10.2",
}

// nodeE2EImagesV134 are those of Kubernetes v1.34.12 (the skew release), kept so
// that KUBELET_VERSION=v1.34.12 make node-conformance still finds its images.
var nodeE2EImagesV134 = []string{
	"registry.k8s.io/e2e-test-images/busybox:1.37.0-1",
	"registry.k8s.io/e2e-test-images/nginx:1.14-4",
	"registry.k8s.io/e2e-test-images/httpd:2.4.38-4",
	"registry.k8s.io/e2e-test-images/nonroot:1.4",
	"registry.k8s.io/e2e-test-images/nonewprivs:1.3",
	"registry.k8s.io/pause:3.10.1",
}

func fakeInputs() inputs {
	return inputs{
		Busybox:    []byte("busybox"),
		Applets:    []string{"[", "busybox", "ipcs", "ls", "pgrep", "sh"},
		Helpers:    map[string][]byte{"nginx": []byte("n"), "httpd": []byte("h"), "nonewprivs": []byte("p"), "pause": []byte("z"), "curl": []byte("c"), "dig": []byte("d"), "nc": []byte("nc")},
		Agnhost:    map[string][]byte{"agnhost": []byte("agnhost"), "localhost.crt": []byte("crt"), "localhost.key": []byte("key")},
		AgnhostTag: "2.66.1",
	}
}

// renderAll maps every name to its rendered image.
func renderAll(t *testing.T) (map[string]published, map[string]*image) {
	imgs, err := catalog(fakeInputs())
	require.NoError(t, err)
	pubs, byName := map[string]published{}, map[string]*image{}
	for _, img := range imgs {
		p, err := render(img)
		require.NoError(t, err)
		for _, n := range img.Names {
			_, _, err := repoAndRef(n)
			require.NoError(t, err, n)
			require.NotContains(t, pubs, n, "name used twice")
			pubs[n], byName[n] = p, img
		}
	}
	return pubs, byName
}

func TestCatalog(t *testing.T) {
	pubs, byName := renderAll(t)
	for _, n := range append(append(critestImages, nodeE2EImages...), nodeE2EImagesV134...) {
		require.Contains(t, pubs, n)
	}

	// Reproducible: a second build gives the same digests.
	again, _ := renderAll(t)
	for n, p := range pubs {
		require.Equal(t, p.Top().Digest, again[n].Top().Digest, n)
	}

	// One ID per image; names that share an image share it on purpose.
	ids := map[string]string{}
	for n, p := range pubs {
		id := p.Config.Digest.String()
		if other, ok := ids[id]; ok {
			require.Same(t, byName[other], byName[n], "%s and %s share an ID", n, other)
		}
		ids[id] = n
	}
	same := func(a, b string) { require.Equal(t, pubs[a].Top().Digest, pubs[b].Top().Digest, a+" vs "+b) }
	same("registry.k8s.io/pause:3.9", "k8s.gcr.io/pause:3.9")
	same("gcr.io/k8s-staging-cri-tools/test-image-tags:1", "gcr.io/k8s-staging-cri-tools/test-image-tags:3")
	same("docker.io/library/busybox:latest", "docker.io/library/busybox:1.36")

	for name, user := range map[string]string{
		"gcr.io/k8s-staging-cri-tools/test-image-user-uid":            "1002",
		"gcr.io/k8s-staging-cri-tools/test-image-user-username":       "www-data",
		"gcr.io/k8s-staging-cri-tools/test-image-user-uid-group":      "1003:1004",
		"gcr.io/k8s-staging-cri-tools/test-image-user-username-group": "www-data:1004",
		"gcr.io/k8s-staging-cri-tools/test-image-predefined-group":    "1000",
		"registry.k8s.io/e2e-test-images/nonroot:1.4":                 "1234",
		"registry.k8s.io/e2e-test-images/nonroot:1.5":                 "1234",
	} {
		var cfg ocispec.Image
		require.NoError(t, json.Unmarshal(pubs[name].Config.Data, &cfg))
		require.Equal(t, user, cfg.Config.User, name)
	}

	// The bench image is about 50 MB.
	var size int
	for _, l := range pubs["docker.io/shimd/bench:50mb"].Layers {
		size += len(l.Data)
	}
	require.InDelta(t, 50e6, size, 3e6)
}

// The agnhost image holds the binary it was given, runs it as upstream's does,
// and is left out without one.
func TestAgnhostImage(t *testing.T) {
	pubs, _ := renderAll(t)
	const name = "registry.k8s.io/e2e-test-images/agnhost:2.66.1"
	var cfg ocispec.Image
	require.NoError(t, json.Unmarshal(pubs[name].Config.Data, &cfg))
	require.Equal(t, []string{"/agnhost"}, cfg.Config.Entrypoint)
	require.Equal(t, []string{"pause"}, cfg.Config.Cmd)
	files := map[string]string{}
	eachFile(t, pubs[name], func(h *tar.Header, data []byte) { files[h.Name] = string(data) + h.Linkname })
	require.Equal(t, "agnhost", files["agnhost"])
	require.Equal(t, "agnhost", files["agnhost-2"], "a hard link to /agnhost")
	require.Equal(t, "c", files["usr/bin/curl"])
	require.Equal(t, "crt", files["localhost.crt"])
	require.Equal(t, "key", files["localhost.key"])
	require.Contains(t, files["bin/bash"], "exec /bin/sh")
	require.Contains(t, files["etc/group"], "group-defined-in-image:x:50000:user-defined-in-image")

	in := fakeInputs()
	in.Agnhost = nil
	imgs, err := catalog(in)
	require.NoError(t, err)
	for _, img := range imgs {
		require.NotContains(t, img.Names, name)
	}
}

func TestLayerHardLinksAndModes(t *testing.T) {
	pubs, _ := renderAll(t)
	files := map[string]*tar.Header{}
	var order []string
	eachFile(t, pubs["registry.k8s.io/e2e-test-images/nonewprivs:1.3"], func(h *tar.Header, _ []byte) {
		require.True(t, h.ModTime.Equal(epoch), h.Name)
		files[h.Name], order = h, append(order, h.Name)
	})
	sh := files["bin/sh"]
	require.NotNil(t, sh)
	require.Equal(t, byte(tar.TypeLink), sh.Typeflag)
	require.Equal(t, "bin/busybox", sh.Linkname)
	require.Equal(t, int64(0o755), sh.Mode, "a hard link's header mode is applied to the file")
	require.Less(t, indexOf(order, "bin/busybox"), indexOf(order, "bin/["), "link target first")
	require.Equal(t, int64(0o4755), files["usr/local/bin/nnp"].Mode)
	require.Equal(t, int64(0o1777), files["tmp/"].Mode)
	require.Equal(t, 0, files["usr/local/bin/nnp"].Uid)
}

// eachFile calls fn for every entry of every layer of p, in order.
func eachFile(t *testing.T, p published, fn func(h *tar.Header, data []byte)) {
	t.Helper()
	for _, l := range p.Layers {
		zr, err := gzip.NewReader(bytes.NewReader(l.Data))
		require.NoError(t, err)
		tr := tar.NewReader(zr)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			require.NoError(t, err)
			b, err := io.ReadAll(tr)
			require.NoError(t, err)
			fn(h, b)
		}
	}
}

func indexOf(ss []string, s string) int {
	for i, x := range ss {
		if x == s {
			return i
		}
	}
	return -1
}

func TestRepoAndRef(t *testing.T) {
	for _, tc := range []struct{ name, repo, tag string }{
		{"registry.k8s.io/pause:3.9", "pause", "3.9"},
		{"docker.io/library/busybox:1.36", "library/busybox", "1.36"},
		{"public.ecr.aws/docker/library/busybox:1", "docker/library/busybox", "1"},
		{"gcr.io/k8s-staging-cri-tools/hostnet-nginx-amd64", "k8s-staging-cri-tools/hostnet-nginx-amd64", "latest"},
	} {
		repo, tag, err := repoAndRef(tc.name)
		require.NoError(t, err)
		require.Equal(t, tc.repo, repo, tc.name)
		require.Equal(t, tc.tag, tag, tc.name)
	}
}
