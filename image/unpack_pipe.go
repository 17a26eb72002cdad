package image

import (
	"errors"
	"io"
	"sync"

	"github.com/opencontainers/go-digest"
)

// The pieces a pull's layers move through: a claim on each chain id (keyedMutex) and
// a bounded in-memory pipe from a layer's download to its extraction (chunkPipe).

// keyedMutex serialises work on one key (a snapshot chain id), so that concurrent
// pulls of images sharing a layer download it once.
type keyedMutex struct {
	mu    sync.Mutex
	locks map[string]*keyedEntry
}

type keyedEntry struct {
	mu   sync.Mutex
	refs int
}

// tryLock takes key's lock if it is free.
func (k *keyedMutex) tryLock(key string) (unlock func(), ok bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.locks == nil {
		k.locks = map[string]*keyedEntry{}
	}
	if k.locks[key] != nil {
		return nil, false
	}
	e := &keyedEntry{refs: 1}
	e.mu.Lock()
	k.locks[key] = e
	return k.unlocker(key, e), true
}

func (k *keyedMutex) unlocker(key string, e *keyedEntry) func() {
	return func() {
		e.mu.Unlock()
		k.mu.Lock()
		e.refs--
		if e.refs == 0 {
			delete(k.locks, key)
		}
		k.mu.Unlock()
	}
}

func (k *keyedMutex) lock(key string) (unlock func()) {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[string]*keyedEntry{}
	}
	e := k.locks[key]
	if e == nil {
		e = &keyedEntry{}
		k.locks[key] = e
	}
	e.refs++
	k.mu.Unlock()
	e.mu.Lock()
	return k.unlocker(key, e)
}

const (
	prefetchLayers = 2  // layers downloaded ahead of the one being applied
	prefetchChunks = 32 // of chunkSize: at most 8 MiB buffered per layer
	chunkSize      = 256 << 10
)

var chunkPool = sync.Pool{New: func() any { b := make([]byte, chunkSize); return &b }}

// chunkPipe is an in-memory pipe holding up to depth chunks, so that its writer can
// run ahead of its reader.
type chunkPipe struct {
	ch     chan []byte
	cur    []byte        // unread part of buf
	buf    []byte        // a chunk from chunkPool, returned when read
	done   chan struct{} // closed by CloseRead: the writer stops
	once   sync.Once
	errMu  sync.Mutex
	werr   error
	closed bool
	diffID digest.Digest // set by download before it closes the pipe without error
}

func newChunkPipe(depth int) *chunkPipe {
	return &chunkPipe{ch: make(chan []byte, depth), done: make(chan struct{})}
}

// ReadFrom reads r in large chunks.
func (p *chunkPipe) ReadFrom(r io.Reader) (int64, error) {
	var n int64
	for {
		buf := chunkPool.Get().(*[]byte)
		m, err := io.ReadFull(r, *buf)
		if m > 0 {
			select {
			case p.ch <- (*buf)[:m]:
				n += int64(m)
			case <-p.done:
				chunkPool.Put(buf)
				return n, io.ErrClosedPipe
			}
		} else {
			chunkPool.Put(buf)
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// CloseWithError ends the stream; the reader gets err (or EOF) after the data.
func (p *chunkPipe) CloseWithError(err error) {
	p.errMu.Lock()
	defer p.errMu.Unlock()
	if p.closed {
		return
	}
	p.closed, p.werr = true, err
	close(p.ch)
}

// CloseRead tells the writer to stop.
func (p *chunkPipe) CloseRead() { p.once.Do(func() { close(p.done) }) }

func (p *chunkPipe) Read(b []byte) (int, error) {
	for len(p.cur) == 0 {
		if p.buf != nil {
			full := p.buf[:cap(p.buf)]
			p.buf = nil
			chunkPool.Put(&full)
		}
		c, ok := <-p.ch
		if !ok {
			p.errMu.Lock()
			err := p.werr
			p.errMu.Unlock()
			if err == nil {
				err = io.EOF
			}
			return 0, err
		}
		p.cur, p.buf = c, c
	}
	n := copy(b, p.cur)
	p.cur = p.cur[n:]
	return n, nil
}

var errNoManifest = errors.New("the image has no manifest for this platform with a config and layers to unpack")
