package nri

import (
	"context"
	"strings"

	"github.com/containerd/log"
	nrilog "github.com/containerd/nri/pkg/log"
)

// logger hands the NRI library's messages to shimd's log. The library reports at
// error level, on every start, that it has no WASM plugin engine; shimd is built
// without one on purpose (build tag nri_no_wasm), so that message is debug here.
type logger struct{}

func (logger) Debugf(ctx context.Context, format string, args ...any) {
	log.G(ctx).Debugf(format, args...)
}

func (logger) Infof(ctx context.Context, format string, args ...any) {
	log.G(ctx).Infof(format, args...)
}

func (logger) Warnf(ctx context.Context, format string, args ...any) {
	log.G(ctx).Warnf(format, args...)
}

func (logger) Errorf(ctx context.Context, format string, args ...any) {
	if wasmDisabled(format) {
		log.G(ctx).Debugf(format, args...)
		return
	}
	log.G(ctx).Errorf(format, args...)
}

// wasmDisabled tells the library's "no WASM engine" message by its format.
func wasmDisabled(format string) bool {
	return strings.HasPrefix(format, "failed to initialize WASM support")
}

func init() { nrilog.Set(logger{}) }
