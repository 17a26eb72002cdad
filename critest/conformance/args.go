package conformance

import (
	"fmt"
	"os"
	"strconv"
)

// DefaultParallel is critest's parallelism when CRITEST_PARALLEL is unset:
// four ginkgo nodes fit the 2-core build machine.
const DefaultParallel = 4

// Settings are what the environment asks of a critest run.
type Settings struct {
	// Parallel ginkgo nodes (CRITEST_PARALLEL, default DefaultParallel).
	Parallel int
	// Focus is a ginkgo focus regular expression (CRITEST_FOCUS), or "".
	Focus string
	// Runs is how many times the suite runs in one environment
	// (CRITEST_RUNS, default 1; make critest-soak sets 3).
	Runs int
	// Handler is the runtime handler every pod of the suite runs with
	// (critest -runtime-handler); "" is the runtime's default.
	Handler string
	// NRISocket is the runtime's NRI socket (critest -nri-socket): critest's NRI
	// contract specs connect a plugin there; "" skips them.
	NRISocket string
}

// SettingsFromEnv reads CRITEST_PARALLEL, CRITEST_FOCUS and CRITEST_RUNS.
func SettingsFromEnv() (Settings, error) {
	return settingsFrom(os.Getenv)
}

func settingsFrom(getenv func(string) string) (Settings, error) {
	s := Settings{Parallel: DefaultParallel, Runs: 1, Focus: getenv("CRITEST_FOCUS")}
	for _, v := range []struct {
		name string
		dst  *int
	}{{"CRITEST_PARALLEL", &s.Parallel}, {"CRITEST_RUNS", &s.Runs}} {
		raw := getenv(v.name)
		if raw == "" {
			continue
		}
		n, err := strconv.Atoi(raw)
		if err != nil || n < 1 {
			return Settings{}, fmt.Errorf("%s=%q: want a positive integer", v.name, raw)
		}
		*v.dst = n
	}
	return s, nil
}

// Args is critest's command line for one run against endpoint
// ("unix:///path/shimd.sock"), with crictl's config file config (critest
// otherwise reads /etc/crictl.yaml; the endpoints given here win). With Parallel 1 the -parallel flag is left
// out: critest aborts on -parallel=1 ("Use of go test -parallel"). With more,
// critest runs the ginkgo CLI, which must be on PATH.
func Args(endpoint, config string, s Settings, skip string) []string {
	args := []string{
		"-config", config,
		"-runtime-endpoint", endpoint,
		"-image-endpoint", endpoint,
		"-ginkgo.no-color",
		"-ginkgo.v", // each spec's name and, when skipped while running, why
	}
	if s.Parallel > 1 {
		args = append(args, fmt.Sprintf("-parallel=%d", s.Parallel))
	}
	if s.Handler != "" {
		args = append(args, "-runtime-handler", s.Handler)
	}
	if s.NRISocket != "" {
		args = append(args, "-nri-socket", s.NRISocket)
	}
	if skip != "" {
		args = append(args, "-ginkgo.skip", skip)
	}
	if s.Focus != "" {
		args = append(args, "-ginkgo.focus", s.Focus)
	}
	return args
}
