// callwaits reads a Go execution trace of shimd (BENCH_TRACE=1, or debug.address's
// /debug/pprof/trace) and splits the time of each CRI call of one RPC, inside shimd,
// into where it went: the connection's reader goroutine waiting for a CPU after its
// data came, the reader's own run until it started the call's goroutine, that
// goroutine waiting for a CPU, the handler (shimd's interceptor opens a trace region
// named by the RPC), the goroutine's end, and the server's writer goroutine (grpc-go's
// loopyWriter) until its next write to a client.
//
//	go run . TRACE [RPC]    (RPC: PodSandboxStatus by default)
//	go run . -held TRACE    where goroutines held a processor for more than 2 ms at
//	                        a time, by the stack they left it with
//
// It is its own module so that shimd's build does not take golang.org/x/exp.
package main

import (
	"flag"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"

	"golang.org/x/exp/trace"
)

// gor is what the trace tells of one goroutine.
type gor struct {
	created    trace.Time
	creator    trace.GoID
	firstRun   trace.Time
	end        trace.Time
	region     string
	rs, re     trace.Time
	runnableAt []trace.Time // each move to runnable
	runningAt  []trace.Time // each move to running
	syscallAt  []trace.Time // each system call
	srvWriter  bool         // a gRPC server connection's loopyWriter
}

// parts are the columns, in order.
var parts = []string{"reader waits", "reader runs", "call waits", "handler", "call ends", "writer writes"}

func main() {
	rows := flag.Bool("rows", false, "print each call's row too")
	held := flag.Bool("held", false, "print where goroutines held a processor for more than 2 ms")
	flag.Parse()
	if flag.NArg() < 1 {
		fmt.Fprintln(os.Stderr, "usage: callwaits [-rows] TRACE [RPC] | callwaits -held TRACE")
		os.Exit(2)
	}
	rpc := "PodSandboxStatus"
	if flag.NArg() > 1 {
		rpc = flag.Arg(1)
	}
	gs, long, err := read(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if *held {
		printHeld(long)
		return
	}
	calls := split(gs, rpc)
	fmt.Printf("%s: %d calls in the trace; ms, p50 / p90 / sum (a part not seen is left out)\n", rpc, len(calls))
	for i, name := range parts {
		var col []float64
		for _, c := range calls {
			if c[i] >= 0 {
				col = append(col, c[i])
			}
		}
		fmt.Printf("%-14s n=%-4d %s\n", name, len(col), summary(col))
	}
	var totals []float64
	for _, c := range calls {
		t := 0.0
		for _, v := range c {
			t += math.Max(v, 0)
		}
		totals = append(totals, t)
	}
	fmt.Printf("%-14s n=%-4d %s\n", "all parts", len(totals), summary(totals))
	if *rows {
		fmt.Println(strings.Join(parts, " | "))
		for _, c := range calls {
			fmt.Printf("%8.2f %8.2f %8.2f %8.2f %8.2f %8.2f\n", c[0], c[1], c[2], c[3], c[4], c[5])
		}
	}
}

// heldRuns sums, by how a goroutine left its processor (its new state and top
// frames), its runs longer than 2 ms.
type heldRuns map[string]*heldSum

type heldSum struct {
	n  int
	ms float64
}

func read(path string) (map[trace.GoID]*gor, heldRuns, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	r, err := trace.NewReader(f)
	if err != nil {
		return nil, nil, err
	}
	gs := map[trace.GoID]*gor{}
	long := heldRuns{}
	get := func(id trace.GoID) *gor {
		if gs[id] == nil {
			gs[id] = &gor{}
		}
		return gs[id]
	}
	for {
		ev, err := r.ReadEvent()
		if err != nil {
			break // io.EOF, or a trace cut short: what was read is used
		}
		switch ev.Kind() {
		case trace.EventRegionBegin:
			g := get(ev.Goroutine())
			g.region, g.rs = ev.Region().Type, ev.Time()
		case trace.EventRegionEnd:
			get(ev.Goroutine()).re = ev.Time()
		case trace.EventStateTransition:
			st := ev.StateTransition()
			if st.Resource.Kind != trace.ResourceGoroutine {
				continue
			}
			g := get(st.Resource.Goroutine())
			from, to := st.Goroutine()
			if s := st.Stack.String() + ev.Stack().String(); strings.Contains(s, "loopyWriter") && strings.Contains(s, "NewServerTransport") {
				g.srvWriter = true
			}
			if from == trace.GoNotExist && to == trace.GoRunnable {
				g.created, g.creator = ev.Time(), ev.Goroutine()
			}
			if from == trace.GoRunning && len(g.runningAt) > 0 {
				// The run that ends began at the goroutine's last move to running.
				if d := span(g.runningAt[len(g.runningAt)-1], ev.Time()); d > 2 {
					k := to.String() + topFrames(st.Stack, ev.Stack())
					if long[k] == nil {
						long[k] = &heldSum{}
					}
					long[k].n++
					long[k].ms += d
				}
			}
			switch to {
			case trace.GoRunnable:
				g.runnableAt = append(g.runnableAt, ev.Time())
			case trace.GoRunning:
				if g.firstRun == 0 {
					g.firstRun = ev.Time()
				}
				g.runningAt = append(g.runningAt, ev.Time())
			case trace.GoSyscall:
				g.syscallAt = append(g.syscallAt, ev.Time())
			case trace.GoNotExist:
				g.end = ev.Time()
			}
		}
	}
	return gs, long, nil
}

// topFrames names a stack by its first frames.
func topFrames(stacks ...trace.Stack) string {
	out, n := "", 0
	for _, s := range stacks {
		for f := range s.Frames() {
			if n == 6 {
				return out
			}
			out += " < " + f.Func
			n++
		}
	}
	return out
}

func printHeld(long heldRuns) {
	keys := make([]string, 0, len(long))
	runs, total := 0, 0.0
	for k, v := range long {
		keys = append(keys, k)
		runs += v.n
		total += v.ms
	}
	slices.SortFunc(keys, func(a, b string) int { return int(math.Copysign(1, long[b].ms-long[a].ms)) })
	fmt.Printf("runs over 2 ms: %d, %.0f ms; by how they left the processor:\n", runs, total)
	for _, k := range keys[:min(15, len(keys))] {
		fmt.Printf("%7.0f ms %5d  %s\n", long[k].ms, long[k].n, k)
	}
}

// split returns, for each call of rpc whose goroutine the trace saw from its start to
// its handler's end, its parts in ms (-1: not seen).
func split(gs map[trace.GoID]*gor, rpc string) [][6]float64 {
	var out [][6]float64
	for _, g := range gs {
		if g.region != rpc || g.created == 0 || g.re == 0 {
			continue
		}
		c := [6]float64{-1, -1, span(g.created, g.firstRun), span(g.rs, g.re), span(g.re, g.end), -1}
		if r := gs[g.creator]; r != nil {
			ran := last(r.runningAt, g.created)
			c[0], c[1] = span(last(r.runnableAt, ran), ran), span(ran, g.created)
		}
		for _, w := range gs {
			if !w.srvWriter {
				continue
			}
			if t := first(w.syscallAt, g.re); t != 0 && (c[5] < 0 || span(g.re, t) < c[5]) {
				c[5] = span(g.re, t)
			}
		}
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b [6]float64) int { return int(math.Copysign(1, a[2]-b[2])) })
	return out
}

func last(ts []trace.Time, notAfter trace.Time) trace.Time {
	var best trace.Time
	for _, t := range ts {
		if t <= notAfter && t > best {
			best = t
		}
	}
	return best
}

func first(ts []trace.Time, notBefore trace.Time) trace.Time {
	for _, t := range ts {
		if t >= notBefore {
			return t
		}
	}
	return 0
}

func span(a, b trace.Time) float64 {
	if a == 0 || b == 0 || b < a {
		return -1
	}
	return float64(b-a) / 1e6
}

func summary(v []float64) string {
	if len(v) == 0 {
		return "-"
	}
	s := slices.Clone(v)
	slices.Sort(s)
	sum := 0.0
	for _, x := range s {
		sum += x
	}
	at := func(p float64) float64 { return s[min(len(s)-1, max(0, int(math.Ceil(p*float64(len(s))))-1))] }
	return fmt.Sprintf("%7.2f / %7.2f / %7.0f", at(0.5), at(0.9), sum)
}
