package bench

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseCommSamples(t *testing.T) {
	out := `           runc 10648      7fb3372abf02
         swapper     0  ffffffff821f2c2b
  runc:[2:INIT] 10650  ffffffff821f2c2b
           runc 10648  ffffffff811f2c2b
     my prog 77  4005d0
`
	c, err := parseCommSamples(out, time.Millisecond)
	require.NoError(t, err)
	require.Equal(t, map[string]int{"runc": 1, "my prog": 1}, c.user)
	require.Equal(t, map[string]int{"runc": 1, "runc:[2:INIT]": 1}, c.kernel)
	lines := c.lines("shimd", 2)
	require.Equal(t, []string{
		"shimd: runc: 1.0 ms per pod (kernel 0.5)",
		"shimd: my prog: 0.5 ms per pod (kernel 0.0)",
		"shimd: runc:[2:INIT]: 0.5 ms per pod (kernel 0.5)",
		"shimd: all but idle: 2.0 ms per pod (kernel 1.0), 4 samples of 1ms",
	}, strings.Split(strings.TrimSpace(lines), "\n"))

	// Names under 1% of the samples are summed.
	many := strings.Repeat("big 5 4005d0\n", 198) + "small 6 ffffffff811f2c2b\nother 7 4005d0\n"
	c, err = parseCommSamples(many, time.Millisecond)
	require.NoError(t, err)
	require.Equal(t, []string{
		"x: big: 198.0 ms per pod (kernel 0.0)",
		"x: the rest (2 names): 2.0 ms per pod (kernel 1.0)",
		"x: all but idle: 200.0 ms per pod (kernel 1.0), 200 samples of 1ms",
	}, strings.Split(strings.TrimSpace(c.lines("x", 1)), "\n"))

	_, err = parseCommSamples("runc zz 7fb3\n", time.Millisecond)
	require.Error(t, err)
	_, err = parseCommSamples("runc 12\n", time.Millisecond)
	require.Error(t, err)
}
