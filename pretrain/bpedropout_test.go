package pretrain

import (
	"path/filepath"
	"testing"

	"github.com/posttrainllm/posttrainllm/internal/runtest"
	"github.com/posttrainllm/posttrainllm/internal/runtest/fixture"
	"github.com/posttrainllm/posttrainllm/train"
)

// A run with BPE-dropout traces once, trains on other windows than one
// without, and resumes to exactly the losses of an uninterrupted run.
func TestBPEDropoutRunResumesExactly(t *testing.T) {
	cfg := runtest.TinyConfig()
	cfg.Tokenizer, cfg.Model.VocabSize, cfg.Model.DModel = "gpt2", 50257, 16
	cfg.Steps, cfg.Warmup, cfg.CheckpointEvery = 4, 1, 2
	ds := tokenizedDataset(t, "gpt2", fixture.SyntheticText(40_000), cfg.Model.Context)
	run := func(cfg train.Config, dir, resume string) (train.Summary, []train.Metrics) {
		t.Helper()
		return runTrainerOn(t, cfg, ds, dir, resume)
	}
	plain, _ := run(cfg, t.TempDir(), "")
	cfg.BPEDropout = 0.1
	whole := t.TempDir()
	sum, ms := run(cfg, whole, "")
	if sum.Traces != 1 {
		t.Fatalf("step traced %d times with BPE-dropout, want 1", sum.Traces)
	}
	if sum.Loss == plain.Loss {
		t.Fatalf("loss %g with BPE-dropout equals the loss without; the windows were not re-tokenised", sum.Loss)
	}
	resumed := t.TempDir()
	short := cfg
	short.Steps = 2
	run(short, resumed, "")
	_, rms := run(cfg, resumed, filepath.Join(resumed, "checkpoints", "step-00000002"))
	want := map[int]float64{}
	for _, m := range ms {
		want[m.Step] = m.Loss
	}
	n := 0
	for _, m := range rms {
		if m.Step > 2 {
			n++
			if m.Loss != want[m.Step] {
				t.Fatalf("step %d: loss %v after resuming, %v uninterrupted; want equal", m.Step, m.Loss, want[m.Step])
			}
		}
	}
	if n != 2 {
		t.Fatalf("resumed run logged %d steps after step 2, want 2", n)
	}
}
