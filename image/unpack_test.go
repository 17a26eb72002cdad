package image

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
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
