package main

import (
	"testing"
	"time"

	"github.com/posttrainllm/posttrainllm/train"
)

// The start-up line names each phase that ran, and where the plan came from.
func TestFormatStartup(t *testing.T) {
	s := train.Startup{Open: 9500 * time.Millisecond, Probe: 8100 * time.Millisecond,
		FirstEval: 2600 * time.Millisecond, FirstUpdate: 300 * time.Millisecond}
	for _, c := range []struct {
		edit func(*train.Startup)
		want string
	}{
		{func(*train.Startup) {}, "start-up: load 0.2 s, set-up 9.5 s (plan probe 8.1 s), first evaluation 2.6 s, first update 0.3 s"},
		{func(s *train.Startup) { s.Probe, s.PlanCached = 0, true },
			"start-up: load 0.2 s, set-up 9.5 s (plan from the plan cache), first evaluation 2.6 s, first update 0.3 s"},
		{func(s *train.Startup) { s.Probe, s.FirstEval = 0, 0 }, "start-up: load 0.2 s, set-up 9.5 s, first update 0.3 s"},
	} {
		in := s
		c.edit(&in)
		if got := formatStartup(200*time.Millisecond, in); got != c.want {
			t.Errorf("formatStartup(%+v) =\n%q, want\n%q", in, got, c.want)
		}
	}
}
