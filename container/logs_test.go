package container

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestCopyLogStream(t *testing.T) {
	long := strings.Repeat("x", maxLogLine+10)
	tests := []struct {
		name  string
		input string
		want  []string
	}{
		{"lines", "hello\nworld\n", []string{"stdout F hello", "stdout F world"}},
		{"empty line", "\n", []string{"stdout F "}},
		{"no trailing newline", "a\nb", []string{"stdout F a", "stdout P b"}},
		{"echo -n", "DONE", []string{"stdout P DONE"}},
		{"long line is split", long + "\n", []string{"stdout P " + long[:maxLogLine], "stdout F " + long[maxLogLine:]}},
		{"exactly max", strings.Repeat("y", maxLogLine) + "\n", []string{"stdout P " + strings.Repeat("y", maxLogLine), "stdout F "}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "c.log")
			l, err := openLog(path)
			require.NoError(t, err)
			l.now = func() time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC) }
			var raw strings.Builder
			require.NoError(t, copyLogStream(strings.NewReader(tt.input), "stdout", l, &raw))
			require.NoError(t, l.Close())
			require.Equal(t, tt.input, raw.String(), "attached clients see the raw bytes")
			data, err := os.ReadFile(path)
			require.NoError(t, err)
			lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
			require.Len(t, lines, len(tt.want))
			for i, line := range lines {
				require.True(t, strings.HasPrefix(line, "2026-01-02T03:04:05.000000006Z "), line)
				require.Equal(t, tt.want[i], strings.TrimPrefix(line, "2026-01-02T03:04:05.000000006Z "))
			}
		})
	}
}

func TestLogReopen(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "c.log")
	l, err := openLog(path)
	require.NoError(t, err)
	l.writeLine("stdout", false, []byte("before"))
	require.NoError(t, os.Rename(path, path+".1"))
	require.NoError(t, l.reopen())
	l.writeLine("stderr", false, []byte("after"))
	require.NoError(t, l.Close())
	old, _ := os.ReadFile(path + ".1")
	cur, _ := os.ReadFile(path)
	require.Contains(t, string(old), "stdout F before")
	require.Contains(t, string(cur), "stderr F after")
	require.NotContains(t, string(cur), "before")
}
