package finetune

import (
	"github.com/posttrainllm/posttrainllm/internal/runtest"
	"github.com/posttrainllm/posttrainllm/train"
	"math"
	"path/filepath"
	"strings"
	"testing"
)

// A fine-tune's probe measures the fine-tune's own step: with room to
// spare it takes the whole update in one micro-batch, under three
// quarters of that step's peak a smaller one within the budget, and with
// a budget below even one row's logits it refuses without running.
func TestFineTuneProbePlan(t *testing.T) {
	ft := Config{Base: runtest.WriteBase(t), Method: MethodLoRA, Rank: 4, Alpha: 8, Targets: []string{"attn", "mlp"},
		Train: runtest.WriteCompletions(t, "train.jsonl", 0, 40), MaskPrompt: true}
	f, err := New(runtest.FineTuneConfig(3), ft, filepath.Join(t.TempDir(), "run"))
	if err != nil {
		t.Fatal(err)
	}
	k := &fineTuneTask{f: f, cfg: f.Config}
	roomy, err := train.ProbeStepPlan(f.Config, 1<<40, k.probe())
	if err != nil {
		t.Fatal(err)
	}
	if roomy.MicroBatch != 8 || roomy.Steps != 1 || len(roomy.Probes) != 1 || !roomy.Probes[0].Fits || roomy.PeakBytes == 0 {
		t.Fatalf("with 1 TiB: %+v; want micro-batch 8 × 1 from one measured probe", roomy)
	}
	tight, err := train.ProbeStepPlan(f.Config, roomy.PeakBytes/4*3, k.probe())
	if err != nil {
		t.Fatal(err)
	}
	if tight.MicroBatch >= 8 || tight.Steps*tight.MicroBatch != 8 || tight.PeakBytes > tight.BudgetBytes {
		t.Fatalf("with 75%% of the 8-row step's peak: %+v; want a smaller micro-batch within the budget", tight)
	}
	_, err = train.ProbeStepPlan(f.Config, 1<<10, k.probe())
	if err == nil || !strings.Contains(err.Error(), "was not run: needs at least") {
		t.Fatalf("with 1 KiB: %v; want an error naming the skipped candidates", err)
	}
}

// A fine-tune under another plan (a forced micro-batch) runs the same
// updates, to float rounding: the weighted loss is normalised by the
// counted targets of the whole update, whatever its microbatches. The
// metrics say the plan each update ran under.
func TestFineTunePlansGiveTheSameUpdates(t *testing.T) {
	ft := Config{Base: runtest.WriteBase(t), Method: MethodLoRA, Rank: 4, Alpha: 8, Targets: []string{"attn"},
		Train: runtest.WriteCompletions(t, "train.jsonl", 0, 40), MaskPrompt: true}
	runs := map[int][]train.Metrics{}
	for _, mb := range []int{0, 8, 1} {
		cfg := runtest.FineTuneConfig(3) // batch 2 × accum 4
		cfg.MicroBatch = mb
		dir := filepath.Join(t.TempDir(), "run")
		runFineTune(t, cfg, ft, dir, "")
		ms, err := train.ReadMetrics(filepath.Join(dir, train.MetricsFile))
		if err != nil {
			t.Fatal(err)
		}
		runs[mb] = ms
	}
	for mb, want := range map[int][2]int{0: {2, 4}, 8: {8, 1}, 1: {1, 8}} {
		for _, m := range runs[mb] {
			if m.Step > 0 && (m.MicroBatch != want[0] || m.AccumSteps != want[1]) {
				t.Errorf("micro_batch %d: step %d ran micro-batch %d × %d, want %d × %d", mb, m.Step, m.MicroBatch, m.AccumSteps, want[0], want[1])
			}
		}
	}
	for _, mb := range []int{8, 1} {
		for i, m := range runs[mb] {
			w := runs[0][i]
			if m.Step != w.Step || math.Abs(m.Loss-w.Loss) > 1e-5 || math.Abs(m.GradNorm-w.GradNorm) > 1e-5*math.Max(1, w.GradNorm) || m.CountedTokens != w.CountedTokens {
				t.Errorf("micro_batch %d step %d: loss %.7f, grad norm %.7f, %g counted; the static plan's %.7f, %.7f, %g",
					mb, m.Step, m.Loss, m.GradNorm, m.CountedTokens, w.Loss, w.GradNorm, w.CountedTokens)
			}
		}
	}
}
