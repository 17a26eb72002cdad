package image

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sync/singleflight"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// imageMeta is what shimd derives from an image's content.
type imageMeta struct {
	ID     digest.Digest // config digest: the CRI image id
	Size   int64         // compressed size of config and layers
	Config ocispec.Image
	// Annotations are the manifest's (a checkpoint image's org.criu.checkpoint.*).
	Annotations map[string]string
}

// Image is one CRI image: every image record in containerd that resolves to the same
// config digest.
type Image struct {
	ID          string
	RepoTags    []string
	RepoDigests []string
	Size        uint64
	Pinned      bool
	Config      ocispec.Image
	// Records are the containerd image record names.
	Records []string
	// Target is the manifest (or index) of one of the records.
	Target ocispec.Descriptor
	// Annotations are the annotations of the image's manifest for this platform.
	Annotations map[string]string
}

// metaFor reads (once per manifest digest) the config and size of an image.
func (s *Service) metaFor(ctx context.Context, img images.Image) (*imageMeta, error) {
	key := img.Target.Digest.String()
	s.mu.Lock()
	m, ok := s.meta[key]
	s.mu.Unlock()
	if ok {
		return m, nil
	}
	cs := s.opts.Client.ContentStore()
	manifest, err := images.Manifest(ctx, cs, img.Target, s.platform)
	if err != nil {
		return nil, fmt.Errorf("image %s config: %w", img.Name, err)
	}
	cfgDesc := manifest.Config
	size, err := img.Size(ctx, cs, s.platform)
	if err != nil {
		return nil, fmt.Errorf("image %s size: %w", img.Name, err)
	}
	raw, err := readBlob(ctx, s, cfgDesc)
	if err != nil {
		return nil, err
	}
	m = &imageMeta{ID: cfgDesc.Digest, Size: size, Annotations: manifest.Annotations}
	if err := json.Unmarshal(raw, &m.Config); err != nil {
		return nil, fmt.Errorf("image %s config: %w", img.Name, err)
	}
	s.mu.Lock()
	s.meta[key] = m
	s.mu.Unlock()
	return m, nil
}

func readBlob(ctx context.Context, s *Service, desc ocispec.Descriptor) ([]byte, error) {
	ra, err := s.opts.Client.ContentStore().ReaderAt(ctx, desc)
	if err != nil {
		return nil, fmt.Errorf("read blob %s: %w", desc.Digest, err)
	}
	defer ra.Close()
	buf := make([]byte, ra.Size())
	if _, err := ra.ReadAt(buf, 0); err != nil {
		return nil, fmt.Errorf("read blob %s: %w", desc.Digest, err)
	}
	return buf, nil
}

// listCache keeps List's last answer while containerd's image records have not
// changed: the kubelet asks for an image's status before every container it creates,
// and CreateContainer resolves the image again, each a full listing otherwise.
// Changes are seen through containerd's image events (ImagesChanged, while the event
// stream is up: EventsLive) and through shimd's own pulls and removals, at once; a
// change missed anyway (made while the stream was being set up again) is seen soon
// after listCacheTTL: past it, callers still get the answer they would have had and
// the records are read again in the background, as nothing told of a change. Callers
// that find a change share one listing (Service.listing): a burst of pods asks for
// image status a hundred times at once.
type listCache struct {
	mu     sync.Mutex
	gen    uint64 // counts the changes seen
	live   bool   // the event stream is up
	images []*Image
	at     uint64 // gen when images was listed; valid only if it is still gen
	ok     bool
	until  time.Time
	// unpacked holds when "id snapshotter" was found unpacked there (ImageStatus
	// asks before every container the kubelet creates), for the records of
	// generation unpackedGen; a finding counts for listCacheTTL. A layer chain goes
	// only when no image record holds it any more, which is a change of the records;
	// the TTL bounds how long a snapshot removed behind containerd's image records
	// is still reported unpacked. A listing again does not forget the findings.
	unpacked    map[string]time.Time
	unpackedGen uint64
}

// knownUnpacked tells whether the image was found unpacked in snapshotter since the
// records last changed, and whether that finding is fresh (within listCacheTTL).
func (c *listCache) knownUnpacked(key string) (known, fresh bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.live || !c.ok || c.at != c.gen || c.unpackedGen != c.gen {
		return false, false
	}
	at, ok := c.unpacked[key]
	return ok, ok && time.Since(at) < listCacheTTL
}

// forgetUnpacked drops the finding of key when the image was found not unpacked
// after all, if the records have not changed since gen.
func (c *listCache) forgetUnpacked(key string, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen == gen && c.unpackedGen == gen {
		delete(c.unpacked, key)
	}
}

// cached returns the listing when no change has been seen since it was read
// (hit). Past listCacheTTL it is still the answer, and refresh says to read the
// records again: the events told of no change, and the TTL only bounds how long a
// change they missed goes unseen, so no caller need wait for that reading.
func (c *listCache) cached() (images []*Image, gen uint64, hit, refresh bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.live && c.ok && c.at == c.gen {
		return c.images, c.gen, true, !time.Now().Before(c.until)
	}
	return nil, c.gen, false, false
}

// current returns the listing of generation gen if cached would answer with it and
// ask for no refresh: a reading begun for gen need not ask containerd again.
func (c *listCache) current(gen uint64) ([]*Image, bool) {
	images, at, hit, refresh := c.cached()
	return images, hit && !refresh && at == gen
}

// sawUnpacked records that the image was found unpacked, if the records have not
// changed since gen.
func (c *listCache) sawUnpacked(key string, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen != gen {
		return
	}
	if c.unpacked == nil || c.unpackedGen != gen {
		c.unpacked, c.unpackedGen = map[string]time.Time{}, gen
	}
	c.unpacked[key] = time.Now()
}

// unpackedLookup returns the lookup that concurrent callers share (by a key that
// holds gen) to learn whether key's chain is unpacked for the records of generation
// gen: lookup asks the snapshotter, and its finding is remembered. A caller checks
// knownUnpacked and then joins a running lookup or starts one; the lookup it would
// have joined may end between the two, so a lookup first takes a fresh finding that
// another one made meanwhile instead of asking containerd again.
func (c *listCache) unpackedLookup(key string, gen uint64, lookup func(context.Context) error) func(context.Context) (any, error) {
	return func(ctx context.Context) (any, error) {
		if _, fresh := c.knownUnpacked(key); fresh {
			return nil, nil
		}
		err := lookup(ctx)
		switch {
		case err == nil:
			c.sawUnpacked(key, gen)
		case errdefs.IsNotFound(err):
			c.forgetUnpacked(key, gen)
		}
		return nil, err
	}
}

// generation is the count of the changes seen so far.
func (c *listCache) generation() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

const listCacheTTL = 30 * time.Second

// sharedTimeout bounds a call to containerd that concurrent callers share.
const sharedTimeout = time.Minute

// ImagesChanged tells the service that containerd's image records changed.
func (s *Service) ImagesChanged() {
	s.list.mu.Lock()
	s.list.gen++
	s.list.mu.Unlock()
}

// EventsLive tells the service whether containerd's image events reach it; while
// they do not, every List asks containerd.
func (s *Service) EventsLive(live bool) {
	s.list.mu.Lock()
	s.list.live = live
	s.list.gen++
	s.list.mu.Unlock()
}

// List returns every image, grouped by id, sorted by id. Records whose content is
// missing (an interrupted pull, content removed underneath) are left out. The
// answer is shared: callers must not change it.
func (s *Service) List(ctx context.Context) ([]*Image, error) {
	c := &s.list
	images, gen, hit, refresh := c.cached()
	if hit {
		if refresh {
			startShared(ctx, &s.listing, strconv.FormatUint(gen, 10), s.relist(gen))
		}
		return images, nil
	}
	c.mu.Lock()
	live := c.live
	c.mu.Unlock()
	if !live {
		// No events: every caller reads the records itself, after its own call.
		return s.listRecords(ctx)
	}
	// Callers of one generation share a listing begun after that generation's
	// change, so it sees the change.
	v, err := shared(ctx, &s.listing, strconv.FormatUint(gen, 10), s.relist(gen))
	if err != nil {
		return nil, err
	}
	return v.([]*Image), nil
}

// relist reads the records, and keeps them as the listing of generation gen if no
// change has been seen since.
func (s *Service) relist(gen uint64) func(context.Context) (any, error) {
	return func(ctx context.Context) (any, error) {
		c := &s.list
		// A caller that missed the listing of gen may start its own just after
		// the one it would have joined ended: that one's answer is still current.
		if images, ok := c.current(gen); ok {
			return images, nil
		}
		out, err := s.listRecords(ctx)
		if err != nil {
			return nil, err
		}
		c.mu.Lock()
		if c.live && c.gen == gen {
			c.images, c.at, c.ok, c.until = out, gen, true, time.Now().Add(listCacheTTL)
		}
		c.mu.Unlock()
		return out, nil
	}
}

// shared runs fn once for the concurrent callers of key, each waiting until its own
// ctx ends. fn gets a context of its own, bounded by sharedTimeout, as no one
// caller's deadline may end it for the others.
func shared(ctx context.Context, g *singleflight.Group, key string, fn func(context.Context) (any, error)) (any, error) {
	ch := startShared(ctx, g, key, fn)
	select {
	case res := <-ch:
		return res.Val, res.Err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// startShared begins fn for key unless it is running already, and returns where its
// result will come; a caller that does not wait for it leaves it running. fn's
// context keeps ctx's values (containerd's namespace) but not its end.
func startShared(ctx context.Context, g *singleflight.Group, key string, fn func(context.Context) (any, error)) <-chan singleflight.Result {
	return g.DoChan(key, func() (any, error) {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sharedTimeout)
		defer cancel()
		return fn(fctx)
	})
}

func (s *Service) listRecords(ctx context.Context) ([]*Image, error) {
	records, err := s.opts.Client.ImageService().List(ctx)
	if err != nil {
		return nil, fmt.Errorf("list images: %w", err)
	}
	byID := map[string]*Image{}
	for _, rec := range records {
		m, err := s.metaFor(ctx, rec)
		if err != nil {
			continue
		}
		id := m.ID.String()
		img, ok := byID[id]
		if !ok {
			img = &Image{ID: id, Size: uint64(m.Size), Config: m.Config, Target: rec.Target, Annotations: m.Annotations}
			byID[id] = img
		}
		img.Records = append(img.Records, rec.Name)
		img.Pinned = img.Pinned || s.isPinned(rec.Name, rec.Labels)
		ref, err := ParseRef(rec.Name)
		if err != nil || rec.Name != ref.Name {
			continue // not a reference name (e.g. an id record)
		}
		if ref.Digest == "" {
			img.RepoTags = appendUnique(img.RepoTags, ref.Name)
		}
		img.RepoDigests = appendUnique(img.RepoDigests, ref.Repo+"@"+rec.Target.Digest.String())
	}
	out := make([]*Image, 0, len(byID))
	for _, img := range byID {
		sort.Strings(img.RepoTags)
		sort.Strings(img.RepoDigests)
		out = append(out, img)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// Find resolves a reference, an image id or a unique id prefix to a local image.
func (s *Service) Find(ctx context.Context, ref string) (*Image, error) {
	all, err := s.List(ctx)
	if err != nil {
		return nil, err
	}
	if img := match(all, ref); img != nil {
		return img, nil
	}
	return nil, fmt.Errorf("image %q: %w", ref, errdefs.ErrNotFound)
}

func match(all []*Image, ref string) *Image {
	if d, ok := isImageID(ref); ok {
		for _, img := range all {
			if img.ID == d.String() {
				return img
			}
		}
	}
	if r, err := ParseRef(ref); err == nil {
		for _, img := range all {
			for _, name := range img.Records {
				if name == r.Name {
					return img
				}
			}
			for _, d := range img.RepoDigests {
				if d == r.Name {
					return img
				}
			}
		}
	}
	// A unique prefix of an id, with or without "sha256:".
	prefix := strings.TrimPrefix(ref, "sha256:")
	if len(prefix) < 4 || strings.ContainsAny(prefix, ":/@") {
		return nil
	}
	var found *Image
	for _, img := range all {
		if strings.HasPrefix(strings.TrimPrefix(img.ID, "sha256:"), prefix) {
			if found != nil {
				return nil
			}
			found = img
		}
	}
	return found
}

func appendUnique(list []string, v string) []string {
	for _, x := range list {
		if x == v {
			return list
		}
	}
	return append(list, v)
}

// toCRI converts an image to its CRI form, with uid or username from the image's USER.
func toCRI(img *Image) *runtimeapi.Image {
	out := &runtimeapi.Image{
		Id: img.ID, RepoTags: img.RepoTags, RepoDigests: img.RepoDigests, Size: img.Size,
		Spec: &runtimeapi.ImageSpec{Image: img.ID}, Pinned: img.Pinned,
	}
	user := img.Config.Config.User
	if u, _, _ := strings.Cut(user, ":"); u != "" {
		if uid, err := strconv.ParseInt(u, 10, 64); err == nil {
			out.Uid = &runtimeapi.Int64Value{Value: uid}
		} else {
			out.Username = u
		}
	}
	return out
}
