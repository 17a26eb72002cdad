package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/distribution/reference"
	"github.com/opencontainers/go-digest"
)

// pusher uploads to a registry through the plain v2 HTTP API: HEAD to
// skip blobs the repository has, a cross-repository mount for blobs pushed
// to another repository in this run, else POST + PUT (monolithic upload);
// manifests by PUT.
type pusher struct {
	base   string // "http://127.0.0.1:PORT"
	client *http.Client
	where  map[digest.Digest]string // blob -> a repository that has it
	// Uploaded counts bytes sent, for the summary.
	Uploaded int64
}

func newPusher(base string) *pusher {
	return &pusher{base: base, client: &http.Client{Timeout: 5 * time.Minute}, where: map[digest.Digest]string{}}
}

// repoAndRef splits an upstream name into the repository path the mirror
// serves it under (registry.k8s.io/pause:3.9 -> pause, docker.io/library/
// busybox -> library/busybox) and the tag ("latest" when none is given).
func repoAndRef(name string) (repo, tag string, err error) {
	n, err := reference.ParseNormalizedNamed(name)
	if err != nil {
		return "", "", err
	}
	t, ok := reference.TagNameOnly(n).(reference.Tagged)
	if !ok {
		return "", "", fmt.Errorf("%s: only tags can be pushed", name)
	}
	return reference.Path(n), t.Tag(), nil
}

// push stores p in repo and points tag at it.
func (ps *pusher) push(repo, tag string, p published) error {
	for _, b := range append(p.Layers, p.Config) {
		if err := ps.blob(repo, b); err != nil {
			return fmt.Errorf("%s: blob %s: %w", repo, b.Digest, err)
		}
	}
	if p.Index != nil {
		// The registry checks that an index's manifests exist in the repository.
		if err := ps.manifest(repo, p.Manifest.Digest.String(), p.Manifest); err != nil {
			return err
		}
	}
	return ps.manifest(repo, tag, p.Top())
}

func (ps *pusher) blob(repo string, b blob) error {
	resp, err := ps.do(http.MethodHead, ps.base+"/v2/"+repo+"/blobs/"+b.Digest.String(), nil, "")
	if err != nil {
		return err
	}
	if resp.StatusCode == http.StatusOK {
		ps.where[b.Digest] = repo
		return nil
	}
	start := ps.base + "/v2/" + repo + "/blobs/uploads/"
	if from, ok := ps.where[b.Digest]; ok {
		start += "?" + url.Values{"mount": {b.Digest.String()}, "from": {from}}.Encode()
	}
	resp, err = ps.do(http.MethodPost, start, nil, "")
	if err != nil {
		return err
	}
	switch resp.StatusCode {
	case http.StatusCreated: // mounted
		ps.where[b.Digest] = repo
		return nil
	case http.StatusAccepted:
	default:
		return fmt.Errorf("start upload: %s", resp.Status)
	}
	loc, err := resp.Request.URL.Parse(resp.Header.Get("Location"))
	if err != nil {
		return fmt.Errorf("upload location: %w", err)
	}
	q := loc.Query()
	q.Set("digest", b.Digest.String())
	loc.RawQuery = q.Encode()
	resp, err = ps.do(http.MethodPut, loc.String(), b.Data, "application/octet-stream")
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusCreated {
		return fmt.Errorf("upload: %s", resp.Status)
	}
	ps.Uploaded += int64(len(b.Data))
	ps.where[b.Digest] = repo
	return nil
}

func (ps *pusher) manifest(repo, ref string, b blob) error {
	resp, err := ps.do(http.MethodPut, ps.base+"/v2/"+repo+"/manifests/"+ref, b.Data, b.MediaType)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusCreated {
		return fmt.Errorf("put manifest %s:%s: %s", repo, ref, resp.Status)
	}
	if got := resp.Header.Get("Docker-Content-Digest"); got != b.Digest.String() {
		return fmt.Errorf("put manifest %s:%s: registry says digest %s, want %s", repo, ref, got, b.Digest)
	}
	return nil
}

// do sends one request and returns the response with its body read and
// closed; errors of the registry (4xx, 5xx) carry the body's text.
func (ps *pusher) do(method, u string, body []byte, contentType string) (*http.Response, error) {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, u, r)
	if err != nil {
		return nil, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := ps.client.Do(req)
	if err != nil {
		return nil, err
	}
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	if resp.StatusCode >= 400 && resp.StatusCode != http.StatusNotFound {
		return nil, fmt.Errorf("%s %s: %s: %s", method, u, resp.Status, bytes.TrimSpace(msg))
	}
	return resp, nil
}
