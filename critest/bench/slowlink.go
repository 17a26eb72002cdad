package bench

import (
	"context"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"
)

// slowLink is a reverse proxy in front of a registry that passes response bodies at
// most rate bytes per second, all connections together (one slow link), and that can
// stall: a blob whose digest is in stall gets stallAfter bytes, then nothing until
// the client gives up.
type slowLink struct {
	proxy      *httputil.ReverseProxy
	rate       float64 // bytes per second; 0: unlimited
	stall      map[string]bool
	stallAfter int64

	mu   sync.Mutex
	next time.Time // when the link is free again
}

func newSlowLink(target *url.URL, rate float64) *slowLink {
	l := &slowLink{rate: rate, stall: map[string]bool{}}
	l.proxy = httputil.NewSingleHostReverseProxy(target)
	l.proxy.ModifyResponse = func(resp *http.Response) error {
		stalls := false
		if i := strings.LastIndex(resp.Request.URL.Path, "/blobs/"); i >= 0 && resp.Request.Method == http.MethodGet {
			stalls = l.stalls(resp.Request.URL.Path[i+len("/blobs/"):])
		}
		resp.Body = &slowBody{ReadCloser: resp.Body, link: l, ctx: resp.Request.Context(), stall: stalls}
		return nil
	}
	return l
}

func (l *slowLink) ServeHTTP(w http.ResponseWriter, r *http.Request) { l.proxy.ServeHTTP(w, r) }

// stallBlob makes every later fetch of the blob stall after n bytes.
func (l *slowLink) stallBlob(digest string, n int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stall[digest], l.stallAfter = true, n
}

func (l *slowLink) stalls(digest string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stall[digest]
}

// take waits until n more bytes may pass the link.
func (l *slowLink) take(ctx context.Context, n int) error {
	if l.rate <= 0 {
		return nil
	}
	l.mu.Lock()
	now := time.Now()
	if l.next.Before(now) {
		l.next = now
	}
	l.next = l.next.Add(time.Duration(float64(n) / l.rate * float64(time.Second)))
	wait := time.Until(l.next)
	l.mu.Unlock()
	if wait <= 0 {
		return nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// slowBody is a response body through the link, read in chunks of at most 32 KiB.
type slowBody struct {
	io.ReadCloser
	link  *slowLink
	ctx   context.Context
	stall bool
	sent  int64
}

func (b *slowBody) Read(p []byte) (int, error) {
	if len(p) > 32<<10 {
		p = p[:32<<10]
	}
	if b.stall {
		if left := b.link.stallAfter - b.sent; left <= 0 {
			<-b.ctx.Done()
			return 0, b.ctx.Err()
		} else if int64(len(p)) > left {
			p = p[:left]
		}
	}
	n, err := b.ReadCloser.Read(p)
	b.sent += int64(n)
	if werr := b.link.take(b.ctx, n); werr != nil {
		return n, werr
	}
	return n, err
}
