package container

import (
	"fmt"
	"strings"
	"time"
)

// steps times the steps of one call for its log line ("name=duration ..."), which the
// benchmarks read for their per-step profile (critest/bench).
type steps struct {
	last time.Time
	b    strings.Builder
}

func newSteps() *steps { return &steps{last: time.Now()} }

// done ends the step name: the time since the previous step ended (or the start).
func (s *steps) done(name string) {
	now := time.Now()
	if s.b.Len() > 0 {
		s.b.WriteByte(' ')
	}
	fmt.Fprintf(&s.b, "%s=%s", name, now.Sub(s.last).Round(time.Microsecond))
	s.last = now
}

func (s *steps) String() string { return s.b.String() }
