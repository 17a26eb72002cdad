//go:build integration

package e2e

import (
	"archive/tar"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
)

// Replays of containerd's CRI checkpoint-restore vulnerabilities of June 2026: a
// checkpoint archive is the pod author's, so nothing in it may reach the host
// (docs/operating.md, "Security").

// rewriteArchive copies the tar at src to dst, passing each entry through edit,
// which may change the header and data, or drop the entry (false); extra entries
// are appended.
func rewriteArchive(t *testing.T, src, dst string, edit func(h *tar.Header, data []byte) ([]byte, bool), extra ...tarEntry) {
	t.Helper()
	in, err := os.Open(src)
	require.NoError(t, err)
	defer in.Close()
	out, err := os.Create(dst)
	require.NoError(t, err)
	defer out.Close()
	tr, tw := tar.NewReader(in), tar.NewWriter(out)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		data, err := io.ReadAll(tr)
		require.NoError(t, err)
		data, keep := edit(h, data)
		if !keep {
			continue
		}
		h.Size = int64(len(data))
		require.NoError(t, tw.WriteHeader(h))
		_, err = tw.Write(data)
		require.NoError(t, err)
	}
	for _, e := range extra {
		require.NoError(t, tw.WriteHeader(&tar.Header{Name: e.Name, Linkname: e.Link, Typeflag: e.Type, Mode: e.Mode, Size: int64(len(e.Data))}))
		_, err := tw.Write(e.Data)
		require.NoError(t, err)
	}
	require.NoError(t, tw.Close())
}

// editJSON changes a JSON object.
func editJSON(t *testing.T, data []byte, edit func(m map[string]any)) []byte {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(data, &m))
	edit(m)
	out, err := json.Marshal(m)
	require.NoError(t, err)
	return out
}

// CVE-2026-53489, CVE-2026-53492 and CVE-2026-50195 (containerd): restoring a
// container from a checkpoint archive trusted the archive. Its container.log, a
// symbolic link to a host file, became the restored container's log (the host file
// read through the CRI log); CDI annotations in its spec.dump added devices and host
// mounts no one asked for; the image names in its config.dump made containerd pull
// an image and tag it with any name, poisoning the node's images. The restored
// container's log must be its own, no annotation of the archive may reach its spec,
// and no image may be pulled or tagged.
func TestCVE_2026_53489_CheckpointArchiveTrusted(t *testing.T) {
	requireRoot(t)
	requireCRIU(t)
	env, cr := cveEnv(t, harness.Options{}, "", "")
	pull(t, env, busyboxImage)
	rs := env.Shimd.Runtime(t)
	is := env.Shimd.Images(t)
	writeCDISpec(t, env.Shimd.CDISpecDir(), "cve.yaml",
		"cdiVersion: \"0.6.0\"\nkind: cve.test/dev\ndevices:\n- name: evil\n  containerEdits:\n    env: [\"CVE_CDI_INJECTED=1\"]\n")
	secret := filepath.Join(t.TempDir(), "host-secret")
	require.NoError(t, os.WriteFile(secret, []byte("host-secret-53489\n"), 0o600))
	evil := cr.push(t, busyboxBase(t), "cve/evil", "v1")
	busybox := imageStatus(t, is, busyboxImage)

	src := newPod(t, rs, "cp-src")
	id := src.run(src.container("src", "sleep", "3600"))
	dir := t.TempDir()
	orig := filepath.Join(dir, "orig.tar")
	_, err := rs.CheckpointContainer(ctxT(t, 2*time.Minute), &runtimeapi.CheckpointContainerRequest{ContainerId: id, Location: orig, Timeout: 60})
	require.NoError(t, err)

	crafted := filepath.Join(dir, "crafted.tar")
	rewriteArchive(t, orig, crafted, func(h *tar.Header, data []byte) ([]byte, bool) {
		switch strings.TrimPrefix(h.Name, "./") {
		case "container.log":
			return nil, false
		case "config.dump":
			return editJSON(t, data, func(m map[string]any) {
				m["rootfsImageName"] = "docker.io/library/cve-victim:latest"
				m["rootfsImage"] = evil
			}), true
		case "spec.dump":
			return editJSON(t, data, func(m map[string]any) {
				a, _ := m["annotations"].(map[string]any)
				if a == nil {
					a = map[string]any{}
				}
				a["cdi.k8s.io/cve"] = "cve.test/dev=evil"
				a["org.systemd.property.ExecStopPost"] = "['/bin/touch', '/tmp/cve-2026-53492']"
				m["annotations"] = a
			}), true
		}
		return data, true
	}, tarEntry{Name: "container.log", Type: tar.TypeSymlink, Link: secret, Mode: 0o777})

	dst := newPod(t, rs, "cp-dst")
	cfg := dst.container("restored", "sleep", "3600")
	cfg.Image = &runtimeapi.ImageSpec{Image: crafted}
	rid, err := createOrRefuse(t, dst, cfg)
	if err != nil {
		t.Logf("refused: %v", err)
	} else {
		_, err := rs.StartContainer(ctxT(t, 2*time.Minute), &runtimeapi.StartContainerRequest{ContainerId: rid})
		t.Logf("restore: %v", err)
		logPath := filepath.Join(dst.logDir, cfg.LogPath)
		if fi, err := os.Lstat(logPath); err == nil {
			require.Zero(t, fi.Mode()&os.ModeSymlink, "the restored container's log is a link")
		}
		data, _ := os.ReadFile(logPath)
		require.NotContains(t, string(data), "host-secret", "the restored container's log reads a host file")
		resp, err := rs.ReopenContainerLog(ctxT(t, time.Minute), &runtimeapi.ReopenContainerLogRequest{ContainerId: rid})
		t.Logf("reopen log: %v %v", resp, err)
		data, _ = os.ReadFile(logPath)
		require.NotContains(t, string(data), "host-secret", "the restored container's log reads a host file")

		ctx := namespaces.WithNamespace(ctxT(t, time.Minute), env.Namespace)
		c, err := env.Containerd.Client(t).LoadContainer(ctx, rid)
		require.NoError(t, err)
		spec, err := c.Spec(ctx)
		require.NoError(t, err)
		require.NotContains(t, spec.Annotations, "cdi.k8s.io/cve", "an annotation of the archive reached the spec")
		require.NotContains(t, spec.Annotations, "org.systemd.property.ExecStopPost", "an annotation of the archive reached the spec")
		require.NotContains(t, strings.Join(spec.Process.Env, " "), "CVE_CDI_INJECTED", "a CDI device of the archive was injected")
	}

	// The tag-poisoning form: the archive names busybox:latest as the image and an
	// image of another registry as its reference.
	poison := filepath.Join(dir, "poison.tar")
	rewriteArchive(t, orig, poison, func(h *tar.Header, data []byte) ([]byte, bool) {
		if strings.TrimPrefix(h.Name, "./") == "config.dump" {
			return editJSON(t, data, func(m map[string]any) {
				m["rootfsImageRef"], m["rootfsImageName"], m["rootfsImage"] = evil, busyboxImage, evil
			}), true
		}
		return data, true
	})
	cfg = dst.container("poison", "sleep", "3600")
	cfg.Image = &runtimeapi.ImageSpec{Image: poison}
	_, err = rs.CreateContainer(ctxT(t, 2*time.Minute), &runtimeapi.CreateContainerRequest{PodSandboxId: dst.id, Config: cfg, SandboxConfig: dst.cfg})
	t.Logf("poisoning archive: %v", err)

	// No image pulled, none tagged.
	for _, r := range cr.requests() {
		require.NotContains(t, r.Path, "/manifests/", "the archive's image was fetched: %s %s", r.Method, r.Path)
	}
	resp, err := is.ImageStatus(ctxT(t, time.Minute), &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: "docker.io/library/cve-victim:latest"}})
	require.NoError(t, err)
	require.Nil(t, resp.Image, "the archive's name was given to an image")
	require.Equal(t, busybox.Id, imageStatus(t, is, busyboxImage).Id, "busybox's tag moved")
	stopRemove(t, rs, dst.id)
	stopRemove(t, rs, src.id)
}
