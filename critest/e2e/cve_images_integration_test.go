//go:build integration

package e2e

import (
	"archive/tar"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
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

// Replays of published vulnerabilities of containerd's CRI plugin, CRI-O and their
// shims that an image or a registry triggers (docs/operating.md, "Security"). Each
// test fails on the vulnerable behaviour.

// statusFields runs cfg in pod, lets it print its /proc/self/status and returns the
// fields (Uid, Gid, Groups, CapInh, ...) by name.
func statusFields(t *testing.T, pod *podFixture, cfg *runtimeapi.ContainerConfig) map[string]string {
	t.Helper()
	f, err := runStatus(t, pod, cfg)
	require.NoError(t, err)
	return f
}

// runStatus is statusFields for a config shimd may refuse (InvalidArgument).
func runStatus(t *testing.T, pod *podFixture, cfg *runtimeapi.ContainerConfig) (map[string]string, error) {
	t.Helper()
	cfg.Command = []string{"sh", "-c", "cat /proc/self/status; echo END-OF-STATUS; exec sleep 3600"}
	id, err := createOrRefuse(t, pod, cfg)
	if err != nil {
		return nil, err
	}
	pod.start(id)
	log := waitLog(t, filepath.Join(pod.logDir, cfg.LogPath), "END-OF-STATUS")
	fields := map[string]string{}
	for _, line := range strings.Split(log, "\n") {
		// CRI log lines: "<time> stdout F <content>"
		if f := strings.SplitN(line, " ", 4); len(f) == 4 {
			if k, v, ok := strings.Cut(f[3], ":"); ok {
				fields[k] = strings.TrimSpace(v)
			}
		}
	}
	return fields, nil
}

// createOrRefuse creates cfg in pod and returns its id, or the error, which must be
// a deliberate refusal: InvalidArgument (the request's fault) or FailedPrecondition
// (the image's, for a field the container takes from it).
func createOrRefuse(t *testing.T, pod *podFixture, cfg *runtimeapi.ContainerConfig) (string, error) {
	t.Helper()
	resp, err := pod.rs.CreateContainer(ctxT(t, time.Minute), &runtimeapi.CreateContainerRequest{
		PodSandboxId: pod.id, Config: cfg, SandboxConfig: pod.cfg})
	if err != nil {
		require.Contains(t, []codes.Code{codes.InvalidArgument, codes.FailedPrecondition}, status.Code(err), "%v", err)
		return "", err
	}
	return resp.ContainerId, nil
}

// CVE-2023-25173 (containerd) and CVE-2022-2995 (CRI-O): the groups the image's
// /etc/group gives the container's user were not set as supplementary groups, so a
// file denied to one of them ("rwx---r--" owned by that group) was readable.
// The process must have them, whether the user comes from the image (by name or
// uid) or from run_as_user.
func TestCVE_2023_25173_ImageUserSupplementaryGroups(t *testing.T) {
	requireRoot(t)
	env, cr := cveEnv(t, harness.Options{}, "", "")
	passwd := "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/home:/bin/false\nalice:x:1234:1234:alice:/home/alice:/bin/sh\n"
	group := "root:x:0:\nnogroup:x:65534:\nalice:x:1234:\ncve-extra:x:5555:alice\ncve-other:x:6666:nobody,alice\n"
	base := busyboxBase(t)
	base.addLayer(t,
		tarEntry{Name: "etc/passwd", Type: tar.TypeReg, Mode: 0o644, Data: []byte(passwd)},
		tarEntry{Name: "etc/group", Type: tar.TypeReg, Mode: 0o644, Data: []byte(group)},
	)
	refs := map[string]string{}
	for _, user := range []string{"alice", "1234", ""} {
		img := *base
		img.Config.Config.User = user
		img.Config.Config.Labels = map[string]string{"user": user} // distinct images
		refs[user] = cr.push(t, &img, "cve/groups", "user"+user)
		pull(t, env, refs[user])
	}
	rs := env.Shimd.Runtime(t)
	pod := newPod(t, rs, "groups")
	for _, tt := range []struct {
		name, user string
		runAs      *runtimeapi.Int64Value
	}{
		{"image-user-name", "alice", nil},
		{"image-user-uid", "1234", nil},
		{"run-as-user", "", &runtimeapi.Int64Value{Value: 1234}},
	} {
		cfg := pod.container(tt.name)
		cfg.Image.Image = refs[tt.user]
		cfg.Linux.SecurityContext.RunAsUser = tt.runAs
		f := statusFields(t, pod, cfg)
		require.Equal(t, "1234", strings.Fields(f["Uid"])[0], tt.name)
		require.Equal(t, "1234", strings.Fields(f["Gid"])[0], tt.name)
		require.ElementsMatch(t, []string{"1234", "5555", "6666"}, strings.Fields(f["Groups"]), "%s: supplementary groups", tt.name)
	}
	stopRemove(t, rs, pod.id)
}

// CVE-2024-40635: containerd turned an image User (or uid:gid) above 2^31-1 into a
// negative int32 that ended up as uid 0: the container ran as root. Such a user must
// be refused, or at least not run as root, from the image and from run_as_user.
func TestCVE_2024_40635_UIDOverflowRunsAsRoot(t *testing.T) {
	requireRoot(t)
	env, cr := cveEnv(t, harness.Options{}, "", "")
	pull(t, env, busyboxImage)
	base := busyboxBase(t)
	users := []string{"2147483648", "2147483648:2147483648", "4294967296", "4294967296:4294967296", "1000:4294967296", "-1", "18446744073709551616"}
	rs := env.Shimd.Runtime(t)
	pod := newPod(t, rs, "uidoverflow")
	try := func(name string, cfg *runtimeapi.ContainerConfig) {
		f, err := runStatus(t, pod, cfg)
		if err != nil {
			t.Logf("%s: refused: %v", name, err)
			return
		}
		t.Logf("%s: ran as %s / %s", name, f["Uid"], f["Gid"])
		for _, id := range strings.Fields(f["Uid"] + " " + f["Gid"]) {
			require.NotEqual(t, "0", id, "%s: the container runs as root", name)
		}
	}
	for i, user := range users {
		img := *base
		img.Config.Config.User = user
		ref := cr.push(t, &img, "cve/uid", "u"+strconv.Itoa(i))
		pull(t, env, ref)
		cfg := pod.container("image-user-" + strconv.Itoa(i))
		cfg.Image.Image = ref
		try("image user "+user, cfg)
	}
	for i, uid := range []int64{1 << 31, 1 << 32, -1, 1<<63 - 1} {
		cfg := pod.container("run-as-" + strconv.Itoa(i))
		cfg.Linux.SecurityContext.RunAsUser = &runtimeapi.Int64Value{Value: uid}
		try("run_as_user "+strconv.FormatInt(uid, 10), cfg)
		cfg = pod.container("run-as-group-" + strconv.Itoa(i))
		cfg.Linux.SecurityContext.RunAsUser = &runtimeapi.Int64Value{Value: 1000}
		cfg.Linux.SecurityContext.RunAsGroup = &runtimeapi.Int64Value{Value: uid}
		try("run_as_group "+strconv.FormatInt(uid, 10), cfg)
	}
	stopRemove(t, rs, pod.id)
}

// CVE-2020-15157: containerd fetched a layer from the URLs its manifest lists and
// sent the registry's credentials there. A server other than the registry must never
// see them.
func TestCVE_2020_15157_CredentialsToForeignLayerURL(t *testing.T) {
	requireRoot(t)
	const user, password = "alice", "s3cret-15157"
	env, cr := cveEnv(t, harness.Options{}, user, password)
	img := busyboxBase(t)
	layer := img.addLayer(t, tarEntry{Name: "foreign", Type: tar.TypeReg, Mode: 0o644, Data: []byte("from a foreign URL\n")})
	var mu sync.Mutex
	var foreign []cveRequest
	data := img.blobs[layer.Digest]
	fhost := serveHTTP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		foreign = append(foreign, cveRequest{r.Method, r.URL.Path, r.Header.Get("Authorization") + r.Header.Get("Proxy-Authorization")})
		mu.Unlock()
		writeBlob(w, r, data)
	}))
	l := &img.Layers[len(img.Layers)-1]
	l.MediaType = "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip"
	l.URLs = []string{"http://" + fhost + "/layers/" + layer.Digest.Encoded()}
	ref := cr.push(t, img, "cve/foreign", "v1")

	_, err := env.Shimd.Images(t).PullImage(ctxT(t, 5*time.Minute), &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: ref},
		Auth: &runtimeapi.AuthConfig{Username: user, Password: password}})
	require.NoError(t, err)
	authed := 0
	for _, r := range cr.requests() {
		if r.Authorization != "" {
			authed++
		}
	}
	require.NotZero(t, authed, "the registry never got the credentials: the test proves nothing")
	mu.Lock()
	defer mu.Unlock()
	t.Logf("the foreign server saw %d requests", len(foreign))
	for _, r := range foreign {
		require.Empty(t, r.Authorization, "credentials sent to a foreign layer URL: %s %s", r.Method, r.Path)
	}
}

// CVE-2026-53488: containerd's CRI plugin copied an image config's labels (and the
// CRI config's) into the containerd container's labels, where containerd's restart
// monitor reads "containerd.io/restart.loguri" = "binary:///..." and runs that
// program on the host. No label of the image or of the CRI request may reach
// containerd's records of the pod or the container.
func TestCVE_2026_53488_ImageLabelsReachContainerd(t *testing.T) {
	requireRoot(t)
	env, cr := cveEnv(t, harness.Options{}, "", "")
	marker := filepath.Join(t.TempDir(), "ran")
	evil := map[string]string{
		"containerd.io/restart.status":   "running",
		"containerd.io/restart.loguri":   "binary:///bin/sh?-c=touch+" + marker,
		"containerd.io/restart.logpath":  marker,
		"containerd.io/gc.ref.content.x": "sha256:0000000000000000000000000000000000000000000000000000000000000000",
		"io.cri-containerd.kind":         "sandbox",
	}
	img := busyboxBase(t)
	img.Config.Config.Labels = evil
	ref := cr.push(t, img, "cve/labels", "v1")
	pull(t, env, ref)
	rs := env.Shimd.Runtime(t)
	pcfg := podConfig("labels")
	pcfg.Labels, pcfg.Annotations = evil, evil
	pod := newPodOf(t, rs, pcfg)
	cfg := pod.container("c", "true")
	cfg.Image.Image = ref
	cfg.Labels = evil
	id := pod.run(cfg)
	waitExited(t, rs, id)

	ctx := namespaces.WithNamespace(ctxT(t, time.Minute), env.Namespace)
	cl := env.Containerd.Client(t)
	for _, cid := range []string{pod.id, id} {
		c, err := cl.LoadContainer(ctx, cid)
		require.NoError(t, err)
		labels, err := c.Labels(ctx)
		require.NoError(t, err)
		for k := range evil {
			require.NotContains(t, labels, k, "label %s of the image or request reached containerd's record of %s", k, cid)
		}
	}
	stopRemove(t, rs, pod.id)
	_, err := os.Stat(marker)
	require.True(t, os.IsNotExist(err), "a label's command ran on the host")
}

// CVE-2026-47262 (containerd): the image's /etc/group was parsed without bound when
// a container was created, so a crafted group file (millions of members on one line)
// made the daemon allocate until the kernel killed it. Creating containers of such an
// image must leave shimd's memory bounded: its peak may grow by far less than the
// members would take as strings (10 MiB of commas: 160 MiB of string headers).
func TestCVE_2026_47262_GroupFileMemory(t *testing.T) {
	requireRoot(t)
	env, cr := cveEnv(t, harness.Options{}, "", "")
	// Lines just under the 64 KiB a line may have, up to just under containerd's
	// 10 MiB cap on the file: 10 million members. And one line past 64 KiB.
	var b strings.Builder
	b.WriteString("root:x:0:\n")
	for i := 0; b.Len() < 10<<20-70000; i++ {
		fmt.Fprintf(&b, "cve%d:x:%d:%s\n", i, 5000+i, strings.Repeat(",", 65000))
	}
	group := b.String()
	long := "root:x:0:\ncve:x:5555:" + strings.Repeat(",", 1<<20) + "\n"
	img := busyboxBase(t)
	img.addLayer(t, tarEntry{Name: "etc/group", Type: tar.TypeReg, Mode: 0o644, Data: []byte(group)})
	img.Config.Config.User = "nobody"
	ref := cr.push(t, img, "cve/groups-bomb", "v1")
	pull(t, env, ref)
	img = busyboxBase(t)
	img.addLayer(t, tarEntry{Name: "etc/group", Type: tar.TypeReg, Mode: 0o644, Data: []byte(long)})
	img.Config.Config.User = "nobody"
	longRef := cr.push(t, img, "cve/groups-bomb", "long")
	pull(t, env, longRef)
	rs := env.Shimd.Runtime(t)
	pod := newPod(t, rs, "groupbomb")
	pid := env.Shimd.PID()
	before := memKiB(t, pid, "VmHWM")
	for i := 0; i < 4; i++ {
		cfg := pod.container("c"+strconv.Itoa(i), "true")
		cfg.Image.Image = ref
		if i == 3 {
			cfg.Image.Image = longRef
		}
		_, err := createOrRefuse(t, pod, cfg)
		t.Logf("create %d: %v (peak %d KiB)", i, err, memKiB(t, pid, "VmHWM"))
	}
	after := memKiB(t, pid, "VmHWM")
	t.Logf("shimd's peak resident memory: %d KiB before, %d KiB after", before, after)
	require.Less(t, after-before, 64<<10, "shimd's memory grew with the group file's members")
	stopRemove(t, rs, pod.id)
}

// CVE-2021-21334 (containerd): containers created from the same image shared one
// copy of the image's environment, so one container's variables showed up in
// another's. Each container must see the image's variables and its own only.
func TestCVE_2021_21334_EnvSharedBetweenContainers(t *testing.T) {
	requireRoot(t)
	env, cr := cveEnv(t, harness.Options{}, "", "")
	img := busyboxBase(t)
	img.Config.Config.Env = append(img.Config.Config.Env, "FROM_IMAGE=1")
	ref := cr.push(t, img, "cve/env", "v1")
	pull(t, env, ref)
	rs := env.Shimd.Runtime(t)
	pod := newPod(t, rs, "env")
	ids := map[string]string{}
	for _, name := range []string{"a", "b", "c"} {
		cfg := pod.container(name, "sleep", "3600")
		cfg.Image.Image = ref
		cfg.Envs = []*runtimeapi.KeyValue{{Key: "ONLY_" + strings.ToUpper(name), Value: []byte(name)}, {Key: "FROM_IMAGE", Value: []byte(name)}}
		ids[name] = pod.run(cfg)
	}
	for name, id := range ids {
		out, err := execSync(t, rs, id, 10, "env")
		require.NoError(t, err)
		for _, other := range []string{"a", "b", "c"} {
			if other == name {
				require.Contains(t, string(out.Stdout), "ONLY_"+strings.ToUpper(other)+"="+other+"\n")
				continue
			}
			require.NotContains(t, string(out.Stdout), "ONLY_"+strings.ToUpper(other), "container %s sees %s's variable", name, other)
		}
		require.Contains(t, string(out.Stdout), "FROM_IMAGE="+name+"\n", "container %s", name)
	}
	stopRemove(t, rs, pod.id)
}
