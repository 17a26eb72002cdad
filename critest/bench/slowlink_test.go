package bench

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"
)

func TestSlowLink(t *testing.T) {
	payload := bytes.Repeat([]byte("x"), 1<<20)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(payload) }))
	defer origin.Close()
	u, _ := url.Parse(origin.URL)
	link := newSlowLink(u, 4<<20) // 4 MiB/s: 1 MiB takes at least 250 ms
	proxy := httptest.NewServer(link)
	defer proxy.Close()

	t0 := time.Now()
	resp, err := http.Get(proxy.URL + "/v2/r/blobs/sha256:aa")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("read %d bytes, %v; want the whole payload", len(got), err)
	}
	if took := time.Since(t0); took < 200*time.Millisecond {
		t.Errorf("1 MiB at 4 MiB/s passed in %s", took)
	}

	// A stalled blob gives its first bytes, then nothing until the client gives up.
	link.stallBlob("sha256:bb", 1000)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, proxy.URL+"/v2/r/blobs/sha256:bb", nil)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	if len(got) != 1000 || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("stalled blob: read %d bytes, %v; want 1000 and the client's deadline", len(got), err)
	}
}
