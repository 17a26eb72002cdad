//go:build integration

package e2e

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
)

func imageStatus(t *testing.T, is runtimeapi.ImageServiceClient, ref string) *runtimeapi.Image {
	t.Helper()
	resp, err := is.ImageStatus(ctxT(t, 30*time.Second), &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
	require.NoError(t, err)
	return resp.Image
}

func removeImage(t *testing.T, is runtimeapi.ImageServiceClient, ref string) {
	t.Helper()
	_, err := is.RemoveImage(ctxT(t, time.Minute), &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
	require.NoError(t, err)
}

func fsUsed(t *testing.T, is runtimeapi.ImageServiceClient) uint64 {
	t.Helper()
	resp, err := is.ImageFsInfo(ctxT(t, 30*time.Second), &runtimeapi.ImageFsInfoRequest{})
	require.NoError(t, err)
	require.NotEmpty(t, resp.ImageFilesystems)
	fs := resp.ImageFilesystems[0]
	require.NotEmpty(t, fs.FsId.Mountpoint)
	require.NotZero(t, fs.Timestamp)
	return fs.UsedBytes.Value
}

func TestImagePullListStatusRemove(t *testing.T) {
	requireRoot(t)
	env, reg := imageEnv(t, harness.Options{})
	is := env.Shimd.Images(t)
	before := fsUsed(t, is)

	// By tag, and by short name (normalised as docker does).
	id := pull(t, env, "busybox")
	img := imageStatus(t, is, "docker.io/library/busybox:latest")
	require.NotNil(t, img)
	require.Equal(t, id, img.Id)
	require.Contains(t, img.RepoTags, "docker.io/library/busybox:latest")
	require.NotEmpty(t, img.RepoDigests)
	require.NotZero(t, img.Size)
	require.Greater(t, fsUsed(t, is), before, "ImageFsInfo counts the new layers")

	// By digest through the mirror.
	digest := reg.Digest(t, "docker.io/library/busybox:1.36")
	byDigest := "docker.io/library/busybox@" + digest
	require.Equal(t, id, pull(t, env, byDigest), "busybox:1.36 is the same image as latest")
	require.NotNil(t, imageStatus(t, is, byDigest))

	// USER of the image: uid or username.
	uidImg := "gcr.io/k8s-staging-cri-tools/test-image-user-uid:latest"
	nameImg := "gcr.io/k8s-staging-cri-tools/test-image-user-username-group:latest"
	pull(t, env, uidImg)
	pull(t, env, nameImg)
	require.Equal(t, int64(1002), imageStatus(t, is, uidImg).Uid.GetValue())
	st := imageStatus(t, is, nameImg)
	require.Equal(t, "www-data", st.Username)
	require.Nil(t, st.Uid)

	list, err := is.ListImages(ctxT(t, 30*time.Second), &runtimeapi.ListImagesRequest{})
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(list.Images), 3)
	list, err = is.ListImages(ctxT(t, 30*time.Second), &runtimeapi.ListImagesRequest{Filter: &runtimeapi.ImageFilter{Image: &runtimeapi.ImageSpec{Image: uidImg}}})
	require.NoError(t, err)
	require.Len(t, list.Images, 1)

	// Absent image: nil, not an error.
	require.Nil(t, imageStatus(t, is, "docker.io/library/nothere:1"))

	// Remove by each form; every form is idempotent.
	removeImage(t, is, uidImg)
	require.Nil(t, imageStatus(t, is, uidImg))
	nameID := imageStatus(t, is, nameImg).Id
	removeImage(t, is, strings.TrimPrefix(nameID, "sha256:")[:12])
	require.Nil(t, imageStatus(t, is, nameImg))
	removeImage(t, is, byDigest)
	require.Nil(t, imageStatus(t, is, "busybox"))
	require.Nil(t, imageStatus(t, is, id))
	removeImage(t, is, id)
	removeImage(t, is, "busybox")
	require.Equal(t, before, fsUsed(t, is), "ImageFsInfo is back after removal")
}

func TestImagePullErrors(t *testing.T) {
	requireRoot(t)
	env, _ := imageEnv(t, harness.Options{})
	is := env.Shimd.Images(t)
	tests := []struct {
		ref  string
		code codes.Code
	}{
		{"docker.io/library/nothere:1", codes.NotFound},
		{"Invalid Ref", codes.InvalidArgument},
		{"busybox@sha256:short", codes.InvalidArgument},
	}
	for _, tt := range tests {
		_, err := is.PullImage(ctxT(t, time.Minute), &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: tt.ref}})
		require.Equal(t, tt.code, status.Code(err), "%s: %v", tt.ref, err)
	}
	// An expired deadline is DeadlineExceeded.
	_, err := is.PullImage(ctxT(t, time.Millisecond), &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "docker.io/shimd/bench:50mb"}})
	require.Equal(t, codes.DeadlineExceeded, status.Code(err), "%v", err)
}

// Credentials reach the registry that asked for them; wrong ones get a clear error.
func TestImagePullWithAuth(t *testing.T) {
	requireRoot(t)
	reg := harness.StartRegistry(t, harness.RegistryOptions{Htpasswd: map[string]string{"alice": "s3cret"}})
	hosts := t.TempDir()
	dir := filepath.Join(hosts, reg.Host())
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "hosts.toml"),
		[]byte(fmt.Sprintf("server = %q\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n", reg.URL(), reg.URL())), 0o644))
	env := harness.New(t, harness.Options{Shimd: harness.ShimdOptions{ExtraConfig: fmt.Sprintf("[registry]\nconfig_path = %q\n", hosts)}})
	is := env.Shimd.Images(t)
	ref := reg.LocalRef("docker.io/library/busybox:1.36")

	_, err := is.PullImage(ctxT(t, time.Minute), &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
	require.Error(t, err, "no credentials")
	_, err = is.PullImage(ctxT(t, time.Minute), &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: ref},
		Auth: &runtimeapi.AuthConfig{Username: "alice", Password: "wrong"}})
	require.Equal(t, codes.Unauthenticated, status.Code(err), "%v", err)
	require.Contains(t, err.Error(), reg.Host())

	resp, err := is.PullImage(ctxT(t, time.Minute), &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: ref},
		Auth: &runtimeapi.AuthConfig{Username: "alice", Password: "s3cret"}})
	require.NoError(t, err)
	require.NotEmpty(t, resp.ImageRef)
	removeImage(t, is, ref)
	// The auth field form (base64 user:password).
	_, err = is.PullImage(ctxT(t, time.Minute), &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: ref},
		Auth: &runtimeapi.AuthConfig{Auth: base64.StdEncoding.EncodeToString([]byte("alice:s3cret"))}})
	require.NoError(t, err)
	removeImage(t, is, ref)
}

// Five concurrent pulls of one image download each blob once.
func TestConcurrentPullsShareOneDownload(t *testing.T) {
	requireRoot(t)
	env, reg := imageEnv(t, harness.Options{})
	is := env.Shimd.Images(t)
	const ref = "docker.io/shimd/bench:50mb"
	var wg sync.WaitGroup
	ids := make([]string, 5)
	errs := make([]error, 5)
	for i := range ids {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			resp, err := is.PullImage(ctxT(t, 5*time.Minute), &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
			errs[i] = err
			if err == nil {
				ids[i] = resp.ImageRef
			}
		}(i)
	}
	wg.Wait()
	for i := range ids {
		require.NoError(t, errs[i])
		require.Equal(t, ids[0], ids[i])
	}
	logData, err := os.ReadFile(reg.LogPath())
	require.NoError(t, err)
	blobGets := map[string]int{}
	for _, line := range strings.Split(string(logData), "\n") {
		if strings.Contains(line, "GET /v2/shimd/bench/blobs/") {
			f := strings.Fields(line[strings.Index(line, "GET "):])
			blobGets[f[1]]++
		}
	}
	require.NotEmpty(t, blobGets)
	for blob, n := range blobGets {
		require.Equal(t, 1, n, "blob %s fetched %d times", blob, n)
	}
	removeImage(t, is, ref)
}

// shimd keeps its image listing between changes of containerd's image records. Its
// own pulls and removals are seen by the very next call; changes made by another
// client of containerd (as `ctr images rm` or `ctr images tag` would) are seen
// through containerd's image events within seconds, long before the listing's 30 s
// limit.
func TestImageChangesByOtherClientsAreSeen(t *testing.T) {
	requireRoot(t)
	env, _ := imageEnv(t, harness.Options{})
	is := env.Shimd.Images(t)
	id := pull(t, env, "busybox")
	require.NotNil(t, imageStatus(t, is, "busybox"), "seen right after the pull")
	require.NotNil(t, imageStatus(t, is, id)) // the listing is kept now

	ctx := namespaces.WithNamespace(ctxT(t, 30*time.Second), env.Shimd.Namespace())
	store := env.Containerd.Client(t).ImageService()
	rec, err := store.Get(ctx, "docker.io/library/busybox:latest")
	require.NoError(t, err)

	// Another client tags the image: the new name is listed.
	rec.Name = "docker.io/library/busybox:other-client"
	_, err = store.Create(ctx, rec)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		img := imageStatus(t, is, "docker.io/library/busybox:other-client")
		return img != nil && img.Id == id
	}, 5*time.Second, 50*time.Millisecond, "a tag made by another client is seen through the events")

	// Another client removes every record of the image: it is gone for shimd too.
	list, err := store.List(ctx)
	require.NoError(t, err)
	for _, r := range list {
		if r.Target.Digest == rec.Target.Digest {
			require.NoError(t, store.Delete(ctx, r.Name))
		}
	}
	require.Eventually(t, func() bool { return imageStatus(t, is, id) == nil && imageStatus(t, is, "busybox") == nil },
		5*time.Second, 50*time.Millisecond, "a removal by another client is seen through the events")

	// shimd's own pull and removal: seen by the very next call.
	require.Equal(t, id, pull(t, env, "busybox"))
	require.NotNil(t, imageStatus(t, is, "busybox"))
	removeImage(t, is, "busybox")
	require.Nil(t, imageStatus(t, is, id))
}

// When the image records change, the calls that find shimd's listing stale share
// one listing, and one snapshot lookup per image, however many come at once: a
// burst of pods asks ImageStatus (and CreateContainer resolves the image) a hundred
// times at once, and each listing is a call to containerd that waits behind the
// pods' own calls. Another client's tag is the change; its event reaches shimd
// within milliseconds, and a round where it had not yet (no listing at all) is
// tried again with a new tag.
func TestStaleImageListingIsShared(t *testing.T) {
	env, sock := debugEnv(t)
	is := env.Shimd.Images(t)
	debug := debugClient(sock)
	require.NotNil(t, imageStatus(t, is, busyboxImage))

	ctx := namespaces.WithNamespace(ctxT(t, 30*time.Second), env.Shimd.Namespace())
	store := env.Containerd.Client(t).ImageService()
	busybox, err := store.Get(ctx, busyboxImage)
	require.NoError(t, err)
	const callers = 50
	const list, stat = "/containerd.services.images.v1.Images/List", "/containerd.services.snapshots.v1.Snapshots/Stat"
	shared := false
	for round := 0; round < 5 && !shared; round++ {
		rec := busybox
		rec.Name = fmt.Sprintf("docker.io/library/busybox:shared-%d", round)
		_, err := store.Create(ctx, rec)
		require.NoError(t, err)
		time.Sleep(200 * time.Millisecond) // for the event
		before := containerdCalls(t, debug)
		var wg sync.WaitGroup
		errs := make([]error, callers)
		for i := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := is.ImageStatus(ctxT(t, 30*time.Second), &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: busyboxImage}})
				if err == nil && resp.GetImage() == nil {
					err = fmt.Errorf("no image")
				}
				errs[i] = err
			}()
		}
		wg.Wait()
		for i, err := range errs {
			require.NoError(t, err, "caller %d", i)
		}
		after := containerdCalls(t, debug)
		calls, _ := callDiff(before, after)
		t.Logf("round %d: %d concurrent ImageStatus calls after a tag by another client made: %s", round, callers, calls)
		lists, stats := after[list]-before[list], after[stat]-before[stat]
		require.LessOrEqual(t, lists, uint64(1), "listings of the image records")
		require.LessOrEqual(t, stats, uint64(1), "snapshot lookups")
		shared = lists == 1
	}
	require.True(t, shared, "in 5 rounds the tag's event never reached shimd before the calls")
	// And the change itself was seen.
	require.NotNil(t, imageStatus(t, is, "docker.io/library/busybox:shared-0"))
}
