//go:build integration

package e2e

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/critest/harness"
)

// slowMarker is the argument list of the slow verifier's sleep (sleep sums them), so
// that the test finds that process and no other.
const slowMarker = "59 1.25"

// writeVerifiers makes a verifier directory in containerd's bindir form:
// 10-record appends its arguments and stdin to record and allows; 20-policy refuses
// the repository "denied"; 30-slow sleeps in a child process for the repository
// "slow".
func writeVerifiers(t *testing.T, record string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range map[string]string{
		"10-record": `{ echo "$@"; cat; } >> ` + record + `; echo recorded`,
		"20-policy": `case "$2" in */denied:*) echo "unsigned image"; exit 3;; esac; echo ok`,
		"30-slow":   `case "$2" in */slow:*) sleep ` + slowMarker + ` & wait;; esac; echo fast`,
	} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755))
	}
	return dir
}

// slowSleeps lists the pids of the slow verifier's sleeps still running.
func slowSleeps() []string {
	var pids []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Equal(cmd, []byte("sleep\x00"+strings.ReplaceAll(slowMarker, " ", "\x00")+"\x00")) {
			pids = append(pids, e.Name())
		}
	}
	return pids
}

// TestImageVerifiersJudgePulls gives shimd (registry.image_verifier_dir) and, beside
// it, containerd's own CRI plugin (its bindir image verifier) one verifier directory,
// and pulls through each: an image the verifiers allow, one a verifier refuses and
// one whose verifier runs past its 2 s timeout. The allowed image is pulled, the
// verifiers having seen its reference and manifest digest; the two others are not,
// and shimd fetched nothing of them but the manifest's resolution. The slow
// verifier's child is killed with it.
func TestImageVerifiersJudgePulls(t *testing.T) {
	requireRoot(t)
	img := busyboxBase(t)
	hosts := t.TempDir()
	reg := harness.StartRegistry(t, harness.RegistryOptions{})
	reg.WriteHermeticHostsDir(t, hosts)
	cr := startCVERegistry(t, hosts, "", "")
	refs := map[string]string{}
	for _, repo := range []string{"allowed", "denied", "slow"} {
		refs[repo] = cr.push(t, img, repo, "v1")
	}
	record := filepath.Join(t.TempDir(), "record")
	dir := writeVerifiers(t, record)

	env := harness.New(t, harness.Options{Shimd: harness.ShimdOptions{
		ExtraConfig: fmt.Sprintf("[registry]\nconfig_path = %q\nimage_verifier_dir = %q\nimage_verifier_timeout = \"2s\"\n", hosts, dir),
	}})
	sides := []struct {
		name string
		is   runtimeapi.ImageServiceClient
	}{{"shimd", env.Shimd.Images(t)}}
	if harness.Tools().Legacy {
		t.Log("containerd 1.6's CRI plugin has no image verifiers: shimd's side only")
	} else {
		cd := harness.StartContainerd(t, harness.ContainerdOptions{WithCRI: true, Namespace: "k8s.io", RegistryConfigPath: hosts,
			ExtraConfig: fmt.Sprintf("[plugins.'io.containerd.image-verifier.v1.bindir']\n  bin_dir = %q\n  per_verifier_timeout = \"2s\"\n", dir)})
		conn, err := grpc.NewClient("unix://"+cd.Address(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		require.NoError(t, err)
		t.Cleanup(func() { conn.Close() })
		sides = append(sides, struct {
			name string
			is   runtimeapi.ImageServiceClient
		}{"containerd CRI", runtimeapi.NewImageServiceClient(conn)})
	}

	for _, side := range sides {
		t.Run(side.name, func(t *testing.T) {
			require.NoError(t, os.WriteFile(record, nil, 0o644))
			pull := func(repo string) error {
				_, err := side.is.PullImage(ctxT(t, time.Minute), &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: refs[repo]}})
				return err
			}
			present := func(repo string) *runtimeapi.Image {
				st, err := side.is.ImageStatus(ctxT(t, 30*time.Second), &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: refs[repo]}})
				require.NoError(t, err)
				return st.GetImage()
			}

			require.NoError(t, pull("allowed"))
			got := present("allowed")
			require.NotNil(t, got)
			require.Len(t, got.RepoDigests, 1)
			dgst := digest.Digest(strings.SplitN(got.RepoDigests[0], "@", 2)[1])
			rec, err := os.ReadFile(record)
			require.NoError(t, err)
			require.Contains(t, string(rec), "-name "+refs["allowed"]+" -digest "+dgst.String()+" -stdin-media-type application/vnd.oci.descriptor.v1+json\n", "the verifier's arguments")
			require.Contains(t, string(rec), `"digest":"`+dgst.String()+`"`, "the descriptor on its stdin")

			err = pull("denied")
			t.Logf("%s, refused: %s: %s", side.name, status.Code(err), status.Convert(err).Message())
			require.Error(t, err)
			require.Contains(t, status.Convert(err).Message(), "verifier 20-policy rejected image (exit code 3): unsigned image")
			require.Nil(t, present("denied"))

			err = pull("slow")
			t.Logf("%s, no judgement: %s: %s", side.name, status.Code(err), status.Convert(err).Message())
			require.Error(t, err)
			require.Contains(t, status.Convert(err).Message(), "30-slow")
			require.Nil(t, present("slow"))
			require.Eventually(t, func() bool { return len(slowSleeps()) == 0 }, 10*time.Second, 100*time.Millisecond,
				"the slow verifier's sleep outlived it: %v", slowSleeps())

			if side.name != "shimd" {
				return
			}
			// shimd's classes, and nothing of the refused images fetched but the
			// resolution of their tags.
			require.Equal(t, codes.PermissionDenied, status.Code(pull("denied")))
			require.Equal(t, codes.FailedPrecondition, status.Code(pull("slow")))
			for _, r := range cr.requests() {
				for _, repo := range []string{"/v2/denied/", "/v2/slow/"} {
					if strings.HasPrefix(r.Path, repo) {
						require.True(t, r.Method == "HEAD" && strings.Contains(r.Path, "/manifests/v1"), "fetched for a refused image: %s %s", r.Method, r.Path)
					}
				}
			}
		})
	}
	env.AssertNoLeaks(t, 30*time.Second)
}
