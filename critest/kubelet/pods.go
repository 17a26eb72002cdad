//go:build integration

package kubelet

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/shimd/shimd/critest/harness"
)

// Namespace of every static pod the tests write.
const Namespace = "shimd-e2e"

// WritePod writes pod as a static pod manifest <name>.yaml (JSON is YAML),
// atomically: the kubelet skips dot files, so it never reads a partial one.
func (k *Kubelet) WritePod(t testing.TB, pod *corev1.Pod) {
	t.Helper()
	pod.APIVersion, pod.Kind = "v1", "Pod"
	if pod.Namespace == "" {
		pod.Namespace = Namespace
	}
	b, err := json.MarshalIndent(pod, "", "  ")
	if err != nil {
		t.Fatalf("kubelet: %v", err)
	}
	tmp := filepath.Join(k.ManifestDir, "."+pod.Name+".tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		t.Fatalf("kubelet: %v", err)
	}
	if err := os.Rename(tmp, k.manifest(pod.Name)); err != nil {
		t.Fatalf("kubelet: %v", err)
	}
}

// RemovePod deletes the manifest of the static pod called name.
func (k *Kubelet) RemovePod(t testing.TB, name string) {
	t.Helper()
	if err := os.Remove(k.manifest(name)); err != nil && !os.IsNotExist(err) {
		t.Fatalf("kubelet: %v", err)
	}
}

func (k *Kubelet) manifest(name string) string { return filepath.Join(k.ManifestDir, name+".yaml") }

// MirrorName is the name the kubelet gives a static pod: <name>-<node>.
func (k *Kubelet) MirrorName(name string) string { return name + "-" + k.NodeName() }

// Pods returns the kubelet's /pods (static pods with their status).
func (k *Kubelet) Pods() ([]corev1.Pod, error) { return k.podList("/pods") }

// podList gets a PodList from the kubelet's API.
func (k *Kubelet) podList(path string) ([]corev1.Pod, error) {
	b, err := k.Get(path)
	if err != nil {
		return nil, err
	}
	var l corev1.PodList
	if err := json.Unmarshal(b, &l); err != nil {
		return nil, fmt.Errorf("decode %s: %w", path, err)
	}
	return l.Items, nil
}

// Pod returns the static pod called name (without the node suffix) from /pods.
func (k *Kubelet) Pod(name string) (*corev1.Pod, error) {
	pods, err := k.Pods()
	if err != nil {
		return nil, err
	}
	for i := range pods {
		if pods[i].Name == k.MirrorName(name) && pods[i].Namespace == Namespace {
			return &pods[i], nil
		}
	}
	return nil, fmt.Errorf("pod %s not in the kubelet's /pods", k.MirrorName(name))
}

// RunningPods returns the kubelet's /runningpods/ (pods as the runtime reports them).
func (k *Kubelet) RunningPods() ([]corev1.Pod, error) { return k.podList("/runningpods/") }

// LogOptions for ContainerLogs; zero values are left out.
type LogOptions struct {
	TailLines int
	Previous  bool
}

// ContainerLogs returns /containerLogs/<ns>/<pod>/<container> of a static pod.
func (k *Kubelet) ContainerLogs(pod, container string, o LogOptions) (string, error) {
	q := url.Values{}
	if o.TailLines > 0 {
		q.Set("tailLines", strconv.Itoa(o.TailLines))
	}
	if o.Previous {
		q.Set("previous", "true")
	}
	p := fmt.Sprintf("/containerLogs/%s/%s/%s", Namespace, k.MirrorName(pod), container)
	if len(q) > 0 {
		p += "?" + q.Encode()
	}
	b, err := k.Get(p)
	return string(b), err
}

// FollowLogs opens /containerLogs/<ns>/<pod>/<container>?follow=true (what
// `kubectl logs -f` reads) from the tailLines newest lines on; the stream lasts
// until ctx ends, the kubelet ends it, or the caller closes it.
func (k *Kubelet) FollowLogs(ctx context.Context, pod, container string, tailLines int) (io.ReadCloser, error) {
	u := fmt.Sprintf("%s/containerLogs/%s/%s/%s?follow=true&tailLines=%d", k.URL(), Namespace, k.MirrorName(pod), container, tailLines)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	// k.client's Timeout would cut the stream: the same transport without it.
	resp, err := (&http.Client{Transport: k.client.Transport}).Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return nil, fmt.Errorf("GET %s: %s: %s", u, resp.Status, bytes.TrimSpace(b))
	}
	return resp.Body, nil
}

// Summary is the part of /stats/summary the tests read
// (k8s.io/kubelet/pkg/apis/stats/v1alpha1).
type Summary struct {
	Node struct {
		NodeName string `json:"nodeName"`
	} `json:"node"`
	Pods []PodStats `json:"pods"`
}

// PodStats is one pod of Summary.
type PodStats struct {
	PodRef struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
		UID       string `json:"uid"`
	} `json:"podRef"`
	Containers []ContainerStats `json:"containers"`
	CPU        *struct {
		UsageCoreNanoSeconds *uint64 `json:"usageCoreNanoSeconds"`
	} `json:"cpu"`
	Memory *struct {
		WorkingSetBytes *uint64 `json:"workingSetBytes"`
	} `json:"memory"`
	Network *struct {
		Interfaces []struct {
			Name    string  `json:"name"`
			RxBytes *uint64 `json:"rxBytes"`
		} `json:"interfaces"`
	} `json:"network"`
}

// ContainerStats is one container of PodStats.
type ContainerStats struct {
	Name string `json:"name"`
	CPU  *struct {
		UsageCoreNanoSeconds *uint64 `json:"usageCoreNanoSeconds"`
	} `json:"cpu"`
	Memory *struct {
		WorkingSetBytes *uint64 `json:"workingSetBytes"`
	} `json:"memory"`
	Rootfs *struct {
		UsedBytes *uint64 `json:"usedBytes"`
	} `json:"rootfs"`
	Logs *struct {
		UsedBytes *uint64 `json:"usedBytes"`
	} `json:"logs"`
}

// StatsSummary returns /stats/summary.
func (k *Kubelet) StatsSummary() (*Summary, error) {
	b, err := k.Get("/stats/summary")
	if err != nil {
		return nil, err
	}
	var s Summary
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("decode /stats/summary: %w", err)
	}
	return &s, nil
}

// Eventually calls f until it returns nil or timeout passes, then fails the
// test with what f last returned. It returns how long it took.
func Eventually(t testing.TB, timeout time.Duration, what string, f func() error) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(timeout)
	for {
		err := f()
		if err == nil {
			return time.Since(start).Round(100 * time.Millisecond)
		}
		if time.Now().After(deadline) {
			harness.Fatalf(t, "%s: not after %s: %v", what, timeout, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// containerStatus finds a container's status (regular or init) in pod.
func containerStatus(pod *corev1.Pod, name string) *corev1.ContainerStatus {
	for _, l := range [][]corev1.ContainerStatus{pod.Status.ContainerStatuses, pod.Status.InitContainerStatuses} {
		for i := range l {
			if l[i].Name == name {
				return &l[i]
			}
		}
	}
	return nil
}

// podCondition returns the status of a pod condition, or "".
func podCondition(pod *corev1.Pod, c corev1.PodConditionType) corev1.ConditionStatus {
	for _, pc := range pod.Status.Conditions {
		if pc.Type == c {
			return pc.Status
		}
	}
	return ""
}

// running checks that every named container runs (and is ready if asked).
func running(pod *corev1.Pod, ready bool, names ...string) error {
	for _, n := range names {
		cs := containerStatus(pod, n)
		switch {
		case cs == nil:
			return fmt.Errorf("pod %s: no status for container %s (phase %s)", pod.Name, n, pod.Status.Phase)
		case cs.State.Running == nil:
			return fmt.Errorf("pod %s: container %s is not running: %s", pod.Name, n, stateString(cs.State))
		case ready && !cs.Ready:
			return fmt.Errorf("pod %s: container %s runs but is not ready", pod.Name, n)
		}
	}
	return nil
}

func stateString(s corev1.ContainerState) string {
	switch {
	case s.Running != nil:
		return "running since " + s.Running.StartedAt.String()
	case s.Waiting != nil:
		return fmt.Sprintf("waiting (%s: %s)", s.Waiting.Reason, s.Waiting.Message)
	case s.Terminated != nil:
		return fmt.Sprintf("terminated (exit %d, %s: %s)", s.Terminated.ExitCode, s.Terminated.Reason, s.Terminated.Message)
	}
	return "unknown"
}
