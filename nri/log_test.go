package nri

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/containerd/log"
	nrilog "github.com/containerd/nri/pkg/log"
	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/require"
)

// The library's "no WASM" message is not an error in a build without WASM; other
// errors still are.
func TestLoggerDemotesWASMDisabled(t *testing.T) {
	var buf bytes.Buffer
	l := logrus.New()
	l.SetOutput(&buf)
	l.SetLevel(logrus.InfoLevel)
	ctx := log.WithLogger(context.Background(), logrus.NewEntry(l))
	nrilog.Errorf(ctx, "failed to initialize WASM support: %v", errors.New("WASM support is disabled"))
	require.Empty(t, buf.String())
	nrilog.Errorf(ctx, "plugin %s failed", "x")
	require.Contains(t, buf.String(), "level=error")
}
