package main

import (
	"errors"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// The conformance image set (issue 47, make conformance): the images the
// Kubernetes [Conformance] tests of the release pull beyond the test image set
// (catalog), pushed into a storage of its own (defaultConformanceStorage) so
// that the test set make check builds stays as it is. The kubeadm cluster's
// conformance run serves it beside the other two.

const defaultConformanceStorage = "/var/cache/shimd/registry-conformance"

// conformanceCatalog is the conformance set: the previous agnhost (the
// StatefulSet and pod update tests move pods to it), the newer nginx (server-side
// apply tests), kitten and nautilus (kubectl's update demo: agnhost's
// test-webserver serving / with data.json naming the picture) and, when
// hack/tools.sh sample-apiserver has built it, the sample API server (the
// aggregator tests; their etcd is the kubeadm set's).
func conformanceCatalog(in inputs) ([]*image, error) {
	if in.Agnhost == nil {
		return nil, errors.New("the conformance set needs agnhost: build it with hack/tools.sh e2e")
	}
	imgs, err := catalog(in)
	if err != nil {
		return nil, err
	}
	byName := map[string]*image{}
	for _, img := range imgs {
		for _, n := range img.Names {
			byName[n] = img
		}
	}
	agnhost, nginx, busybox := byName[e2e+"agnhost:"+in.AgnhostTag], byName[e2e+"nginx:1.27.0-2"], byName[e2e+"busybox:1.37.0-2"]
	if agnhost == nil || nginx == nil || busybox == nil {
		return nil, errors.New("the test set lacks agnhost, nginx or busybox")
	}
	var b builder
	rename := func(img *image, name, doc string) *image {
		c := *img
		c.Names, c.Doc = []string{name}, doc
		return &c
	}
	out := []*image{
		rename(agnhost, e2e+"agnhost:2.55", "agnhost 2.55 (the e2e tests' AgnhostPrev): the agnhost image of the release under the previous tag, a distinct image"),
		rename(nginx, e2e+"nginx:1.28.0-2", "nginx 1.28.0-2 (the e2e tests' NginxNew): the nginx stand-in under the newer tag, a distinct image"),
	}
	for _, pic := range []string{"kitten", "nautilus"} {
		l := b.layer(pic+".jpg and data.json, as upstream's test/images/"+pic, []entry{
			file(pic+".jpg", 0o644, []byte("shimd's offline stand-in for "+pic+".jpg\n")),
			file("data.json", 0o644, []byte("{\n  \"image\": \""+pic+".jpg\"\n}\n")),
		})
		cfg := agnhost.Config
		cfg.Cmd = []string{"test-webserver"}
		out = append(out, &image{Names: []string{e2e + pic + ":1.8"},
			Doc:    pic + " 1.8: the agnhost image with /" + pic + ".jpg (a placeholder) and /data.json, running agnhost test-webserver (serves / on :80)",
			Layers: append(append([]*layer{}, agnhost.Layers...), l), Config: cfg, Format: dockerV2List})
	}
	if in.SampleAPIServer != nil {
		out = append(out, &image{Names: []string{e2e + "sample-apiserver:1.29.2"},
			Doc: "sample-apiserver 1.29.2 (the aggregator tests'): k8s.io/sample-apiserver of the release (hack/tools.sh sample-apiserver) as /sample-apiserver, on the busybox base",
			Layers: append(append([]*layer{}, busybox.Layers...), b.layer("k8s.io/sample-apiserver (hack/tools.sh sample-apiserver)", []entry{
				file("sample-apiserver", 0o755, in.SampleAPIServer)})),
			Config: ocispec.ImageConfig{Entrypoint: []string{"/sample-apiserver"}}, Format: dockerV2List})
	}
	return out, b.err
}
