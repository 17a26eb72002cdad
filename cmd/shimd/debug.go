package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	goruntime "runtime"
	"time"

	"github.com/containerd/log"
)

// debugStats is what /debug/stats answers; leak tests compare it before and after.
type debugStats struct {
	Goroutines int `json:"goroutines"`
	OpenFDs    int `json:"open_fds"`
	// ContainerdCalls counts shimd's calls to containerd by gRPC method since start.
	ContainerdCalls map[string]uint64 `json:"containerd_calls"`
	// ContainerdCallTimes is the latency of the unary ones, by method, since start.
	ContainerdCallTimes map[string]callTimes `json:"containerd_call_times"`
}

// startDebug serves /debug/pprof/ and /debug/stats on cfg.Address (an absolute unix socket
// path, mode 0600, or IP:port) until stop is called. An empty address serves nothing.
func startDebug(ctx context.Context, cfg DebugConfig) (stop func(), err error) {
	addr := cfg.Address
	if addr == "" {
		return func() {}, nil
	}
	// Block and mutex sampling, when asked (both off by default, as in Go).
	if cfg.BlockProfileRate > 0 {
		goruntime.SetBlockProfileRate(cfg.BlockProfileRate)
	}
	if cfg.MutexProfileFraction > 0 {
		goruntime.SetMutexProfileFraction(cfg.MutexProfileFraction)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("/debug/stats", serveDebugStats)
	return serveHTTP(ctx, "debug.address", addr, mux)
}

// serveHTTP serves h on addr (an absolute unix socket path, mode 0600, or IP:port)
// until stop is called; key names the config key in errors and logs.
func serveHTTP(ctx context.Context, key, addr string, h http.Handler) (stop func(), err error) {
	network := "tcp"
	if filepath.IsAbs(addr) {
		network = "unix"
		if err := os.MkdirAll(filepath.Dir(addr), 0o711); err != nil {
			return nil, fmt.Errorf("config key %s: %w", key, err)
		}
		if err := os.Remove(addr); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("config key %s: %w", key, err)
		}
	}
	l, err := net.Listen(network, addr)
	if err != nil {
		return nil, fmt.Errorf("config key %s: listen on %q: %w (choose a free port or path, or set it to \"\" to turn it off)", key, addr, err)
	}
	if network == "unix" {
		if err := os.Chmod(addr, 0o600); err != nil {
			l.Close()
			return nil, err
		}
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.G(ctx).WithError(err).WithField("key", key).Warn("http endpoint stopped")
		}
	}()
	log.G(ctx).WithField("key", key).WithField("address", l.Addr().String()).Info("http endpoint serving")
	return func() {
		_ = srv.Close()
		<-done
		if network == "unix" {
			_ = os.Remove(addr)
		}
	}, nil
}

func serveDebugStats(w http.ResponseWriter, _ *http.Request) {
	// The directory read holds one descriptor of its own: not counted.
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(debugStats{Goroutines: goruntime.NumGoroutine(), OpenFDs: len(fds) - 1, ContainerdCalls: containerdCalls.snapshot(),
		ContainerdCallTimes: containerdCalls.timesSnapshot()})
}
