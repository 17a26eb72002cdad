package container

import (
	"regexp"
	"testing"
	"time"
)

func TestStepsLogLine(t *testing.T) {
	st := newSteps()
	time.Sleep(2 * time.Millisecond)
	st.done("one")
	st.done("two")
	re := regexp.MustCompile(`^one=([0-9.]+)ms two=[0-9.]+[µnm]?s$`)
	m := re.FindStringSubmatch(st.String())
	if m == nil {
		t.Fatalf("steps %q do not read name=duration ...", st.String())
	}
	if d, err := time.ParseDuration(m[1] + "ms"); err != nil || d < 2*time.Millisecond {
		t.Fatalf("step one took %s (%v), slept 2ms in it", m[1], err)
	}
}
