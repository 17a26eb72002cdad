package main

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// SIGUSR1 dumps every goroutine's stack, this test's own among them, and the daemon
// goes on.
func TestSIGUSR1DumpsStacks(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out lockedBuffer
	dumpStacksOnSIGUSR1(ctx, &out)
	require.NoError(t, syscall.Kill(syscall.Getpid(), syscall.SIGUSR1))
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "=== END goroutine stack dump ===") }, 5*time.Second, 10*time.Millisecond)
	s := out.String()
	require.True(t, strings.HasPrefix(s, "=== BEGIN goroutine stack dump ===\ngoroutine "), s[:min(len(s), 200)])
	require.Contains(t, s, "TestSIGUSR1DumpsStacks", "the stacks of all goroutines, the test's among them")
}
