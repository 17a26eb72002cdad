package image

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/mount"

	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sync/singleflight"
)

func TestVerifying(t *testing.T) {
	blob := []byte(strings.Repeat("layer bytes ", 1000))
	desc := ocispec.Descriptor{Digest: digest.FromBytes(blob), Size: int64(len(blob))}
	other := append([]byte(nil), blob...)
	other[10] ^= 1
	tests := []struct {
		name string
		data []byte
		desc ocispec.Descriptor
		want string // "" = reads to EOF
	}{
		{"match", blob, desc, ""},
		{"other bytes", other, desc, "does not match digest"},
		{"short", blob[:len(blob)-1], desc, "got 11999 bytes"},
		{"long", append(append([]byte(nil), blob...), 'x'), desc, "more than the 12000 bytes"},
	}
	for _, tt := range tests {
		got, err := io.ReadAll(newVerifying(bytes.NewReader(tt.data), tt.desc))
		if tt.want == "" {
			if err != nil || !bytes.Equal(got, tt.data) {
				t.Errorf("%s: err %v, %d bytes", tt.name, err, len(got))
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) || !errdefs.IsFailedPrecondition(err) {
			t.Errorf("%s: err %v, want FailedPrecondition containing %q", tt.name, err, tt.want)
		}
	}
}

func TestChunkPipe(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789"), 100_000) // 1 MB: several chunks
	p := newChunkPipe(2)
	go func() {
		_, err := p.ReadFrom(bytes.NewReader(data))
		p.CloseWithError(err)
	}()
	got, err := io.ReadAll(p)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read %d bytes, err %v", len(got), err)
	}

	// The writer's error reaches the reader after the data.
	boom := errors.New("boom")
	p = newChunkPipe(2)
	go func() {
		_, err := p.ReadFrom(io.MultiReader(bytes.NewReader(data[:100]), errReader{boom}))
		p.CloseWithError(err)
	}()
	got, err = io.ReadAll(p)
	if !errors.Is(err, boom) || !bytes.Equal(got, data[:100]) {
		t.Fatalf("read %d bytes, err %v; want 100 bytes and boom", len(got), err)
	}

	// A reader that stops releases a writer blocked on a full pipe.
	p = newChunkPipe(1)
	done := make(chan error, 1)
	go func() {
		_, err := p.ReadFrom(bytes.NewReader(data))
		done <- err
	}()
	p.CloseRead()
	if err := <-done; !errors.Is(err, io.ErrClosedPipe) {
		t.Fatalf("writer: %v, want ErrClosedPipe", err)
	}
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

func TestOverlayDirs(t *testing.T) {
	up, low, ok := overlayDirs([]string{"index=off", "workdir=/s/2/work", "upperdir=/s/2/fs", "lowerdir=/s/1/fs:/s/0/fs"})
	if !ok || up != "/s/2/fs" || strings.Join(low, ",") != "/s/1/fs,/s/0/fs" {
		t.Fatalf("got %q %q %v", up, low, ok)
	}
	if _, _, ok := overlayDirs([]string{"lowerdir=/a:/b"}); ok {
		t.Fatal("a read-only overlay (no upperdir) must not be written in place")
	}
}

type blobFetcher map[digest.Digest][]byte

func (f blobFetcher) Fetch(_ context.Context, desc ocispec.Descriptor) (io.ReadCloser, error) {
	b, ok := f[desc.Digest]
	if !ok {
		return nil, errdefs.ErrNotFound
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

// layerBlob is a gzipped tar of one file owned by the caller, so that applying it
// needs no root.
func layerBlob(t *testing.T, name, data string) (blob []byte, diffID digest.Digest) {
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg,
		Uid: os.Getuid(), Gid: os.Getgid(), ModTime: time.Unix(1700000000, 0)}); err != nil {
		t.Fatal(err)
	}
	tw.Write([]byte(data))
	tw.Close()
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(tb.Bytes())
	zw.Close()
	return gz.Bytes(), digest.FromBytes(tb.Bytes())
}

func TestDownloadApply(t *testing.T) {
	blob, diffID := layerBlob(t, "hello", strings.Repeat("hello layer\n", 50_000)) // several chunks
	desc := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayerGzip, Digest: digest.FromBytes(blob), Size: int64(len(blob))}
	run := func(served []byte) (string, digest.Digest, error) {
		dir := t.TempDir()
		p := newChunkPipe(2)
		go download(context.Background(), blobFetcher{desc.Digest: served}, desc, p)
		mounts := []mount.Mount{{Type: "bind", Source: dir, Options: []string{"rbind", "rw"}}}
		got, err := applyStream(p, func(r io.Reader) error { return apply(context.Background(), mounts, r) })
		p.CloseRead()
		return dir, got, err
	}

	dir, got, err := run(blob)
	if err != nil || got != diffID {
		t.Fatalf("good blob: diff id %s, err %v; want %s", got, err, diffID)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "hello")); err != nil || len(b) != 12*50_000 {
		t.Fatalf("applied file: %d bytes, %v", len(b), err)
	}

	// Other bytes that still decompress (the gzip header's time) and bytes that do
	// not (the trailer) both fail as a digest mismatch.
	for _, at := range []int{4, len(blob) - 3} {
		bad := append([]byte(nil), blob...)
		bad[at] ^= 0xff
		if _, _, err := run(bad); err == nil || !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "does not match digest") {
			t.Errorf("byte %d changed: err %v, want a digest mismatch", at, err)
		}
	}
}

func TestListCacheRemembersUnpackedUntilRecordsChange(t *testing.T) {
	c := &listCache{live: true}
	c.images, c.at, c.ok, c.until = nil, 0, true, time.Now().Add(time.Minute)
	known := func(key string) bool {
		k, fresh := c.knownUnpacked(key)
		if fresh && !k {
			t.Fatalf("%s: fresh but not known", key)
		}
		return fresh
	}
	if known("a overlayfs") {
		t.Fatal("known before it was seen")
	}
	c.sawUnpacked("a overlayfs", c.generation())
	if !known("a overlayfs") || known("a native") {
		t.Fatal("not remembered per image and snapshotter")
	}
	// The list read again for the same records (its TTL ran out) keeps it.
	c.until = time.Now().Add(time.Minute)
	if !known("a overlayfs") {
		t.Fatal("forgotten when the same records were listed again")
	}
	// A finding older than the TTL is still known, but not fresh: asked again.
	c.unpacked["a overlayfs"] = time.Now().Add(-listCacheTTL)
	if k, fresh := c.knownUnpacked("a overlayfs"); !k || fresh {
		t.Fatalf("a finding older than listCacheTTL: known %v, fresh %v; want known, not fresh", k, fresh)
	}
	// Asked again and not found: forgotten.
	c.forgetUnpacked("a overlayfs", c.generation())
	if k, _ := c.knownUnpacked("a overlayfs"); k {
		t.Fatal("still known after a lookup did not find it")
	}
	c.sawUnpacked("a overlayfs", c.generation())
	gen := c.generation()
	c.gen++ // ImagesChanged
	if k, _ := c.knownUnpacked("a overlayfs"); k {
		t.Fatal("still known after the records changed")
	}
	c.sawUnpacked("b overlayfs", gen) // a Stat begun before the change
	c.at = c.gen                      // the list is read again
	if known("b overlayfs") || known("a overlayfs") {
		t.Fatal("a result from before the change was kept")
	}
	c.forgetUnpacked("b overlayfs", gen) // a lookup from before the change changes nothing
	c.sawUnpacked("b overlayfs", c.gen)
	c.forgetUnpacked("b overlayfs", gen)
	if !known("b overlayfs") || known("a overlayfs") {
		t.Fatal("a finding of the new records is not kept alone")
	}
	c.live = false
	if k, _ := c.knownUnpacked("b overlayfs"); k {
		t.Fatal("known while containerd's events do not reach shimd")
	}
}

// A listing past its TTL is still the answer while no change has been seen, and
// asks for a reading in the background; a change or lost events make callers wait
// for a new one.
func TestListCacheAnswersPastTTLWhileNothingChanged(t *testing.T) {
	img := &Image{ID: "sha256:a"}
	c := &listCache{live: true}
	if _, _, hit, _ := c.cached(); hit {
		t.Fatal("a hit before any listing")
	}
	c.images, c.at, c.ok, c.until = []*Image{img}, c.gen, true, time.Now().Add(time.Minute)
	images, gen, hit, refresh := c.cached()
	if !hit || refresh || len(images) != 1 || gen != c.gen {
		t.Fatalf("fresh listing: hit %v refresh %v images %d gen %d", hit, refresh, len(images), gen)
	}
	c.until = time.Now().Add(-time.Second)
	if images, _, hit, refresh := c.cached(); !hit || !refresh || len(images) != 1 {
		t.Fatalf("past its TTL: hit %v refresh %v images %d; want the listing, and a refresh", hit, refresh, len(images))
	}
	c.gen++ // ImagesChanged
	if _, gen, hit, _ := c.cached(); hit || gen != c.gen {
		t.Fatalf("after a change: hit %v gen %d; want a miss at gen %d", hit, gen, c.gen)
	}
	c.at, c.until = c.gen, time.Now().Add(time.Minute)
	c.live = false
	if _, _, hit, _ := c.cached(); hit {
		t.Fatal("a hit while containerd's events do not reach shimd")
	}
}

// A caller that found no fresh finding and starts its lookup just after another
// lookup for the same records ended (so it could not join it) takes that lookup's
// finding: 50 concurrent ImageStatus calls make one snapshot lookup, not two
// (TestStaleImageListingIsShared in critest/e2e saw two).
func TestUnpackedLookupTakesAFindingMadeMeanwhile(t *testing.T) {
	c := &listCache{live: true, ok: true, until: time.Now().Add(time.Minute)}
	var g singleflight.Group
	lookups := 0
	var answer error
	lookup := func(context.Context) error { lookups++; return answer }
	const key = "a overlayfs"
	gen := c.generation()
	statKey := "overlayfs chain " + strconv.FormatUint(gen, 10)
	ctx := context.Background()

	// Both callers check first, and find nothing.
	for range 2 {
		if _, fresh := c.knownUnpacked(key); fresh {
			t.Fatal("fresh before any lookup")
		}
	}
	// The first caller's lookup runs and ends; then the second caller's starts.
	for caller := range 2 {
		if _, err := shared(ctx, &g, statKey, c.unpackedLookup(key, gen, lookup)); err != nil {
			t.Fatalf("caller %d: %v", caller, err)
		}
	}
	if lookups != 1 {
		t.Fatalf("%d snapshot lookups, want 1", lookups)
	}
	// Once the finding is old, a lookup asks again; "not found" is forgotten,
	// and the next lookup asks again too.
	c.unpacked[key] = time.Now().Add(-listCacheTTL)
	answer = errdefs.ErrNotFound
	if _, err := shared(ctx, &g, statKey, c.unpackedLookup(key, gen, lookup)); !errdefs.IsNotFound(err) {
		t.Fatalf("lookup of a removed chain: %v, want not found", err)
	}
	if k, _ := c.knownUnpacked(key); k || lookups != 2 {
		t.Fatalf("after not found: known %v, %d lookups; want forgotten after 2", k, lookups)
	}
	answer = nil
	if _, err := shared(ctx, &g, statKey, c.unpackedLookup(key, gen, lookup)); err != nil || lookups != 3 {
		t.Fatalf("lookup after not found: %v, %d lookups; want a third", err, lookups)
	}
}

// A listing begun for a generation whose listing another caller just finished
// takes that one, unless it is past its TTL (a refresh) or the records changed.
func TestListCacheCurrent(t *testing.T) {
	c := &listCache{live: true}
	gen := c.generation()
	if _, ok := c.current(gen); ok {
		t.Fatal("current before any listing")
	}
	listed := []*Image{{ID: "sha256:a"}}
	c.images, c.at, c.ok, c.until = listed, gen, true, time.Now().Add(listCacheTTL)
	if images, ok := c.current(gen); !ok || len(images) != 1 || images[0].ID != "sha256:a" {
		t.Fatalf("the listing just made: %v, %v", images, ok)
	}
	c.until = time.Now().Add(-time.Second)
	if _, ok := c.current(gen); ok {
		t.Fatal("a listing past its TTL is current: a refresh would not read the records")
	}
	c.until = time.Now().Add(listCacheTTL)
	c.gen++ // ImagesChanged
	if _, ok := c.current(gen); ok {
		t.Fatal("current after the records changed")
	}
	if _, ok := c.current(c.gen); ok {
		t.Fatal("the old listing is current for the new generation")
	}
	c.at = c.gen
	c.live = false
	if _, ok := c.current(c.gen); ok {
		t.Fatal("current while containerd's events do not reach shimd")
	}
}
