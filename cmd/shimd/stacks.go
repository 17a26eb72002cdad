package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	goruntime "runtime"
	"syscall"

	"github.com/containerd/log"
)

// maxStackDump bounds one dump: a daemon with 100,000 goroutines still dumps the
// first 64 MiB of their stacks.
const maxStackDump = 64 << 20

// dumpStacksOnSIGUSR1 writes every goroutine's stack to w (standard error, so the
// journal) each time shimd gets SIGUSR1, as containerd does on the same signal: what
// an operator asks of a daemon that seems stuck, without stopping it. It stops
// listening when ctx ends.
func dumpStacksOnSIGUSR1(ctx context.Context, w io.Writer) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGUSR1)
	go func() {
		defer signal.Stop(ch)
		for {
			select {
			case <-ch:
				n := writeStacks(w)
				log.G(ctx).WithField("bytes", n).Info("goroutine stacks dumped on SIGUSR1")
			case <-ctx.Done():
				return
			}
		}
	}()
}

// writeStacks writes all goroutines' stacks between two marker lines and returns
// the stacks' size.
func writeStacks(w io.Writer) int {
	var buf []byte
	for size := 1 << 20; ; size *= 2 {
		buf = make([]byte, size)
		if n := goruntime.Stack(buf, true); n < size || size >= maxStackDump {
			buf = buf[:n]
			break
		}
	}
	fmt.Fprintf(w, "=== BEGIN goroutine stack dump ===\n%s\n=== END goroutine stack dump ===\n", buf)
	return len(buf)
}
