package pause

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/stretchr/testify/require"
)

// goldenManifestAMD64 is the manifest digest of the linux/amd64 image. It
// changes only when pause.bin or the image layout changes: then bump Version
// (in pause.go and pause.c) and update this.
const goldenManifestAMD64 = "sha256:33bdb25a5cdec01c7dff8bdaa7e1bce1e2f5cdeecf9a18c618b7e1386ba96289"

// elfGOARCH maps ELF machines to the GOARCH they run on.
var elfGOARCH = map[elf.Machine]string{elf.EM_X86_64: "amd64", elf.EM_AARCH64: "arm64"}

func TestBuildIsDeterministic(t *testing.T) {
	a, b := build(bytes.Clone(binary), "amd64"), build(bytes.Clone(binary), "amd64")
	require.Equal(t, a, b)
	require.Equal(t, build(binary, runtime.GOARCH), Build())
	require.Equal(t, goldenManifestAMD64, a.Manifest.Desc.Digest.String(),
		"the image changed: bump Version and update the golden digest")
}

func TestBlobDescriptors(t *testing.T) {
	img := Build()
	for _, tc := range []struct {
		name      string
		blob      Blob
		mediaType string
	}{
		{"manifest", img.Manifest, ocispec.MediaTypeImageManifest},
		{"config", img.Config, ocispec.MediaTypeImageConfig},
		{"layer", img.Layer, ocispec.MediaTypeImageLayer},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.mediaType, tc.blob.Desc.MediaType)
			require.Equal(t, digest.FromBytes(tc.blob.Data), tc.blob.Desc.Digest)
			require.Equal(t, int64(len(tc.blob.Data)), tc.blob.Desc.Size)
		})
	}
}

func TestManifestReferencesConfigAndLayer(t *testing.T) {
	img := Build()
	var m ocispec.Manifest
	require.NoError(t, json.Unmarshal(img.Manifest.Data, &m))
	require.Equal(t, 2, m.SchemaVersion)
	require.Equal(t, ocispec.MediaTypeImageManifest, m.MediaType)
	require.Equal(t, img.Config.Desc, m.Config)
	require.Equal(t, []ocispec.Descriptor{img.Layer.Desc}, m.Layers)
}

func TestConfig(t *testing.T) {
	img := Build()
	var c ocispec.Image
	require.NoError(t, json.Unmarshal(img.Config.Data, &c))
	require.Equal(t, "linux", c.OS)
	require.Equal(t, runtime.GOARCH, c.Architecture)
	require.Equal(t, []string{"/pause"}, c.Config.Entrypoint)
	require.Empty(t, c.Config.Cmd)
	require.Equal(t, "65535:65535", c.Config.User)
	require.Equal(t, "layers", c.RootFS.Type)
	// The layer is uncompressed, so its digest is its diff_id.
	require.Equal(t, []digest.Digest{img.Layer.Desc.Digest}, c.RootFS.DiffIDs)
}

func TestLayerHoldsOnlyPause(t *testing.T) {
	tr := tar.NewReader(bytes.NewReader(Build().Layer.Data))
	hdr, err := tr.Next()
	require.NoError(t, err)
	require.Equal(t, "pause", hdr.Name)
	require.Equal(t, byte(tar.TypeReg), hdr.Typeflag)
	require.Equal(t, int64(0o755), hdr.Mode)
	require.Zero(t, hdr.Uid)
	require.Zero(t, hdr.Gid)
	require.True(t, hdr.ModTime.Equal(time.Unix(0, 0)), "mtime %v", hdr.ModTime)
	body, err := io.ReadAll(tr)
	require.NoError(t, err)
	require.Equal(t, binary, body)
	_, err = tr.Next()
	require.ErrorIs(t, err, io.EOF)
}

func TestBinaryIsStaticELF(t *testing.T) {
	f, err := elf.NewFile(bytes.NewReader(binary))
	require.NoError(t, err)
	defer f.Close()
	for _, p := range f.Progs {
		require.NotEqual(t, elf.PT_INTERP, p.Type, "pause.bin has a dynamic loader")
		require.NotEqual(t, elf.PT_DYNAMIC, p.Type, "pause.bin is dynamically linked")
	}
	// The image says runtime.GOARCH: pause.bin must be built for it.
	require.Equal(t, runtime.GOARCH, elfGOARCH[f.Machine],
		"pause.bin is for %v; rebuild it for %s", f.Machine, runtime.GOARCH)
}

// runnable writes pause.bin to a temp file, or skips if it cannot run here.
func runnable(t *testing.T) string {
	t.Helper()
	f, err := elf.NewFile(bytes.NewReader(binary))
	require.NoError(t, err)
	if runtime.GOOS != "linux" || elfGOARCH[f.Machine] != runtime.GOARCH {
		t.Skipf("pause.bin is for linux/%v, not %s/%s", f.Machine, runtime.GOOS, runtime.GOARCH)
	}
	path := filepath.Join(t.TempDir(), "pause")
	require.NoError(t, os.WriteFile(path, binary, 0o755))
	return path
}

func TestBinaryVersion(t *testing.T) {
	out, err := exec.Command(runnable(t), "-v").Output()
	require.NoError(t, err)
	require.Equal(t, "shimd-pause "+Version+"\n", string(out))
}

func TestBinaryExitsZeroOnSignal(t *testing.T) {
	path := runnable(t)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			cmd := exec.Command(path)
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			require.NoError(t, cmd.Start())
			t.Cleanup(func() { // if an assertion failed before Wait
				if cmd.ProcessState == nil {
					_ = cmd.Process.Kill()
					_ = cmd.Wait()
				}
			})
			waitCaught(t, cmd.Process.Pid, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
			require.NoError(t, cmd.Process.Signal(sig))
			require.NoError(t, cmd.Wait(), "pause must exit 0 on %v", sig)
			require.Empty(t, stdout.String())
			require.Empty(t, stderr.String())
		})
	}
}

// waitCaught waits until pid has handlers installed for all sigs (SigCgt in
// /proc/PID/status), so a signal sent next is not a default-action kill.
func waitCaught(t *testing.T, pid int, sigs ...syscall.Signal) {
	t.Helper()
	var want uint64
	for _, s := range sigs {
		want |= 1 << (uint(s) - 1)
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
		require.NoError(t, err)
		for _, line := range strings.Split(string(status), "\n") {
			if v, ok := strings.CutPrefix(line, "SigCgt:"); ok {
				caught, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
				require.NoError(t, err)
				if caught&want == want {
					return
				}
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("pid %d did not install its signal handlers", pid)
}
