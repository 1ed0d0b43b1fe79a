package finetune

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/posttrainllm/posttrainllm/checkpoint"
	"github.com/posttrainllm/posttrainllm/internal/mlxtest"
	"github.com/posttrainllm/posttrainllm/internal/runtest"
	"github.com/posttrainllm/posttrainllm/internal/runtest/fixture"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/train"
)

// ftRankJobEnv names the file that tells a process started by
// TestDataParallelFineTuneMatchesDoubledBatch which fine-tune to run as
// one rank of a loopback ring.
const ftRankJobEnv = "PTLM_TEST_FT_DP_JOB"

// ftRankJob is that file's content.
type ftRankJob struct {
	Config   train.Config `json:"config"`
	FineTune Config       `json:"finetune"`
	RunDir   string       `json:"run_dir"`
}

// dataParallelFineTune is the LoRA fine-tune both sides of the
// equivalence test run, with batch rows per update: two accumulated
// microbatches (the all-reduce follows the accumulation), clipping (the
// global norm must be that of the whole update's gradients) and
// completions of different lengths, so each rank's rows count a
// different number of targets and the loss must be normalised by the
// global count.
func dataParallelFineTune(t testing.TB, batch int) (train.Config, Config) {
	cfg := runtest.FineTuneConfig(4)
	cfg.Batch, cfg.Accum, cfg.GradClip, cfg.EvalEvery = batch, 2, 0.5, 2
	ft := Config{Base: runtest.WriteBase(t), Method: MethodLoRA, Rank: 4, Alpha: 8, Targets: []string{"attn", "mlp"},
		Train: runtest.WriteCompletions(t, "train.jsonl", 0, 40), Valid: runtest.WriteCompletions(t, "valid.jsonl", 100, 10), MaskPrompt: true}
	return cfg, ft
}

// Two ranks of a LoRA fine-tune over a loopback ring, batch B each, log
// the losses, counted tokens, gradient norms and held-out losses of one
// process with batch 2B and end with its adapters (float tolerance: the
// sums run in another order). Rank 0 alone writes the run folder.
func TestDataParallelFineTuneMatchesDoubledBatch(t *testing.T) {
	cfg, ft := dataParallelFineTune(t, 8)
	single := filepath.Join(t.TempDir(), "single")
	want := runFineTune(t, cfg, ft, single, "")

	runDir, lines := runFineTuneRanks(t, cfg, ft)
	wantLines := readMetrics(t, single)
	if len(lines) != len(wantLines) || len(lines) != cfg.Steps+1 {
		t.Fatalf("the ranks logged %d lines, the single process %d; want %d (step 0 and every update)", len(lines), len(wantLines), cfg.Steps+1)
	}
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-5*math.Max(1, math.Abs(b)) }
	for i, m := range lines {
		w := wantLines[i]
		if m.Step != w.Step || !near(m.Loss, w.Loss) || !near(m.LossLast, w.LossLast) || !near(m.GradNorm, w.GradNorm) || m.CountedTokens != w.CountedTokens {
			t.Errorf("step %d: loss %.7f (last %.7f), grad norm %.7f, %g counted tokens; the doubled batch's %.7f (%.7f), %.7f, %g",
				m.Step, m.Loss, m.LossLast, m.GradNorm, m.CountedTokens, w.Loss, w.LossLast, w.GradNorm, w.CountedTokens)
		}
		if (m.ValLoss == nil) != (w.ValLoss == nil) || m.ValLoss != nil && !near(*m.ValLoss, *w.ValLoss) {
			t.Errorf("step %d: held-out loss %s, the doubled batch's %s", m.Step, valText(m.ValLoss), valText(w.ValLoss))
		}
	}
	got, err := checkpoint.Latest(runDir)
	if err != nil {
		t.Fatal(err)
	}
	mlxtest.Run(t, func(t testing.TB) {
		a, _, err := mlx.LoadSafetensors(filepath.Join(want.LastCheckpoint, checkpoint.AdapterFile))
		if err != nil {
			t.Fatal(err)
		}
		b, _, err := mlx.LoadSafetensors(filepath.Join(got, checkpoint.AdapterFile))
		if err != nil {
			t.Fatal(err)
		}
		if len(a) != len(b) || len(a) == 0 {
			t.Fatalf("%d and %d adapter arrays", len(a), len(b))
		}
		for name, x := range a {
			xv, err := x.Float32s()
			if err != nil {
				t.Fatal(err)
			}
			yv, err := b[name].Float32s()
			if err != nil || len(xv) != len(yv) {
				t.Fatalf("adapter %s: %d values, the doubled batch's %d (%v)", name, len(yv), len(xv), err)
			}
			for i := range xv {
				if d := math.Abs(float64(xv[i] - yv[i])); d > 2e-5 {
					t.Fatalf("adapter %s value %d is %g, the doubled batch's %g", name, i, yv[i], xv[i])
				}
			}
		}
	})
}

// runFineTuneRanks runs the fine-tune ft of cfg as two ranks over a
// loopback ring (TestHelperDataParallelFineTuneRank), batch cfg.Batch/2
// each, and returns the run folder rank 0 wrote and the metrics it logged.
func runFineTuneRanks(t *testing.T, cfg train.Config, ft Config) (string, []train.Metrics) {
	t.Helper()
	dir := t.TempDir()
	job := ftRankJob{Config: cfg, FineTune: ft, RunDir: filepath.Join(dir, "ranks")}
	job.Config.Batch /= 2
	spec, _ := json.Marshal(job)
	jobFile := filepath.Join(dir, "job.json")
	if err := os.WriteFile(jobFile, spec, 0o644); err != nil {
		t.Fatal(err)
	}
	fixture.RunRanks(t, 2, "TestHelperDataParallelFineTuneRank", ftRankJobEnv+"="+jobFile)
	return job.RunDir, readMetrics(t, job.RunDir)
}

// readMetrics reads the metrics log of the run folder dir.
func readMetrics(t testing.TB, dir string) []train.Metrics {
	t.Helper()
	lines, err := train.ReadMetrics(filepath.Join(dir, train.MetricsFile))
	if err != nil {
		t.Fatal(err)
	}
	return lines
}

// TestHelperDataParallelFineTuneRank is one rank of
// TestDataParallelFineTuneMatchesDoubledBatch; run directly it does
// nothing.
func TestHelperDataParallelFineTuneRank(t *testing.T) {
	file := os.Getenv(ftRankJobEnv)
	if file == "" {
		return
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var job ftRankJob
	if err := json.Unmarshal(b, &job); err != nil {
		t.Fatal(err)
	}
	g, err := fixture.InitRing()
	if err != nil {
		t.Fatal(err)
	}
	f, err := New(job.Config, job.FineTune, job.RunDir)
	if err != nil {
		t.Fatal(err)
	}
	f.Group = g
	sum, err := f.Run(context.Background(), "")
	if err != nil {
		t.Fatalf("rank %d: %v", g.Rank(), err)
	}
	if sum.Traces != 1 || sum.Step != job.Config.Steps {
		t.Fatalf("rank %d: %d updates, step traced %d times; want %d and 1", g.Rank(), sum.Step, sum.Traces, job.Config.Steps)
	}
}

// valText prints a held-out loss that may be absent.
func valText(v *float64) string {
	if v == nil {
		return "absent"
	}
	return strconv.FormatFloat(*v, 'f', 7, 64)
}
