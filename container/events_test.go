package container

import (
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestEventHub(t *testing.T) {
	var h eventHub
	if h.active() {
		t.Fatal("active without subscribers")
	}
	a, cancelA := h.subscribe()
	b, cancelB := h.subscribe()
	ev := &runtimeapi.ContainerEventResponse{ContainerId: "c1"}
	h.publish(ev)
	if got := <-a; got != ev {
		t.Fatalf("a got %v", got)
	}
	if got := <-b; got != ev {
		t.Fatalf("b got %v", got)
	}
	cancelA()
	if _, ok := <-a; ok {
		t.Fatal("a still open after cancel")
	}
	cancelA() // twice is fine

	// b falls behind: it is dropped, after the events it had.
	for i := 0; i < eventBuffer+1; i++ {
		h.publish(ev)
	}
	n := 0
	for range b {
		n++
	}
	if n != eventBuffer {
		t.Fatalf("b read %d events before its end, want %d", n, eventBuffer)
	}
	if h.active() {
		t.Fatal("a dropped subscriber is still active")
	}
	cancelB() // after the drop: no double close
}
