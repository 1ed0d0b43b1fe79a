package pretrain

import (
	"context"
	"testing"

	"github.com/posttrainllm/posttrainllm/internal/runtest"
	"github.com/posttrainllm/posttrainllm/internal/runtest/fixture"
	"github.com/posttrainllm/posttrainllm/train"
)

// A run reports its start once, after its first update: the set-up, a
// first evaluation when the run evaluates, the first update, and no probe
// for the CPU's static plan.
func TestRunReportsItsStartup(t *testing.T) {
	cfg := runtest.TinyConfig()
	cfg.Steps, cfg.Warmup, cfg.EvalEvery = 3, 1, 2
	ds := memoryDataset(t, fixture.SyntheticText(60_000), cfg.Model.Context)
	tr, err := New(cfg, ds, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var got []train.Startup
	var logsBefore int
	logs := 0
	tr.Hooks.OnLog = func(train.Metrics) { logs++ }
	tr.Hooks.OnReady = func(s train.Startup) { got = append(got, s); logsBefore = logs }
	if _, err := tr.Run(context.Background(), ""); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 {
		t.Fatalf("OnReady called %d times, want once", len(got))
	}
	s := got[0]
	if s.Open <= 0 || s.FirstEval <= 0 || s.FirstUpdate <= 0 || s.Probe != 0 || s.PlanCached || logsBefore != 0 {
		t.Fatalf("startup %+v (after %d log lines); want set-up, first evaluation and update measured, no probe, before any log line", s, logsBefore)
	}
}
