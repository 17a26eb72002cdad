package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestConformanceCatalog: the conformance set has the images the [Conformance]
// tests pull beyond the test set, each a distinct image, none of the test
// set's names; without agnhost it refuses to build.
func TestConformanceCatalog(t *testing.T) {
	in := fakeInputs()
	in.SampleAPIServer = []byte("sample-apiserver")
	imgs, err := conformanceCatalog(in)
	require.NoError(t, err)
	test, _ := renderAll(t)
	ids := map[string]string{}
	for _, p := range test {
		ids[p.Top().Digest.String()] = "test set"
	}
	var names []string
	for _, img := range imgs {
		p, err := render(img)
		require.NoError(t, err)
		require.NotContains(t, ids, p.Top().Digest.String(), "%s is not a distinct image", img.Names)
		ids[p.Top().Digest.String()] = img.Names[0]
		for _, n := range img.Names {
			require.NotContains(t, test, n, "the test set has %s already", n)
			names = append(names, n)
		}
	}
	require.ElementsMatch(t, []string{e2e + "agnhost:2.55", e2e + "nginx:1.28.0-2", e2e + "kitten:1.8", e2e + "nautilus:1.8", e2e + "sample-apiserver:1.29.2"}, names)

	in.Agnhost = nil
	_, err = conformanceCatalog(in)
	require.Error(t, err)
}
