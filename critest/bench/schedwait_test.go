package bench

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseSchedTimehist(t *testing.T) {
	// perf 6.1's `perf sched timehist` output: a header, then one line per switch-out.
	out := `           time    cpu  task name                       wait time  sch delay   run time
                        [tid/pid]                          (msec)     (msec)     (msec)
--------------- ------  ------------------------------  ---------  ---------  ---------
   13922.938359 [0000]  perf[28030]                         0.000      0.000      0.000 
   13922.939958 [0000]  shimd[700]                          0.000      0.017      1.475 
   13922.940121 [0000]  shimd[701/700]                      0.142      2.500      0.020 
   13922.940889 [0001]  containerd[900/800]                 0.000      0.250      2.386 
   13922.941326 [0000]  <idle>                              0.000      0.000      0.009 
   13922.953371 [0000]  kworker/0:1-cgr[15976]              0.000      0.015      0.031 
   13922.953379 [0001]  memfd:sealed 91[901/800]            12.044     0.061      0.008 
`
	got, err := parseSchedTimehist(out, []int{700, 800})
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Equal(t, []time.Duration{17 * time.Microsecond, 2500 * time.Microsecond}, got[700].delays)
	require.Equal(t, 1495*time.Microsecond, got[700].run)
	require.Equal(t, []time.Duration{250 * time.Microsecond, 61 * time.Microsecond}, got[800].delays)
	require.Equal(t, "shimd: 2 switch-ins, wait for a CPU p50 0.017 ms, max of 2 2.50 ms, sum 3 ms; on a CPU 1 ms\n", got[700].line("shimd"))
	require.Equal(t, "x: no switch-ins seen\n", got[1].line("x"))

	_, err = parseSchedTimehist("   1.0 [0000]  shimd[700]   0.000  x  1.0\n", []int{700})
	require.ErrorContains(t, err, "not numbers")
}
