package finetune

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/posttrainllm/posttrainllm/internal/runtest"
	"github.com/posttrainllm/posttrainllm/rl"
	"github.com/posttrainllm/posttrainllm/train"
)

// writePrompts writes n arithmetic prompts with their answers as a jsonl
// file of GRPO records.
func writePrompts(t testing.TB, name string, n int) string {
	t.Helper()
	var b strings.Builder
	for i := range n {
		line, _ := json.Marshal(map[string]any{"prompt": fmt.Sprintf("%d+%d", i%7, i%5), "answer": fmt.Sprint(i%7 + i%5)})
		b.Write(append(line, '\n'))
	}
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// vowelReward scores a completion by its share of the bytes a, e, i, o
// and u: a reward that differs between a random model's completions, so
// that every group has advantages.
func vowelReward() rl.Weighted {
	return rl.Weighted{Weight: 1, Scorer: rl.FromFunc("vowels", func(_ context.Context, _ rl.Prompt, c rl.Completion) (float64, error) {
		if c.Text == "" {
			return 0, nil
		}
		return float64(strings.Count(c.Text, "a")+strings.Count(c.Text, "e")+strings.Count(c.Text, "i")+
			strings.Count(c.Text, "o")+strings.Count(c.Text, "u")) / float64(len(c.Text)), nil
	})}
}

// grpoBase is a tiny base model with room for the prompts and answers.
func grpoBase(t testing.TB) string {
	mc := runtest.TinyConfig().Model
	mc.Context = 64
	return runtest.WriteBaseModel(t, mc)
}

// runGRPO fine-tunes with the GRPO objective of g plus the vowel reward
// into dir, resuming from resume when set.
func runGRPO(t testing.TB, cfg train.Config, ft Config, g GRPO, dir, resume string, extra ...rl.Weighted) (train.Summary, error) {
	t.Helper()
	obj, err := NewGRPOObjective(g, append([]rl.Weighted{vowelReward()}, extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	f, err := NewWithObjective(cfg, ft, obj, dir)
	if err != nil {
		t.Fatal(err)
	}
	return f.Run(context.Background(), resume)
}

// runGRPOUntil runs as runGRPO does from the start, cancelling the run
// once it has logged step stop.
func runGRPOUntil(t testing.TB, cfg train.Config, ft Config, g GRPO, dir string, stop int) (train.Summary, error) {
	t.Helper()
	obj, err := NewGRPOObjective(g, vowelReward())
	if err != nil {
		t.Fatal(err)
	}
	f, err := NewWithObjective(cfg, ft, obj, dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f.Hooks.OnLog = func(m train.Metrics) {
		if m.Step == stop {
			cancel()
		}
	}
	return f.Run(ctx, "")
}

// grpoSettings are small GRPO settings for the tiny model.
func grpoSettings() GRPO {
	return GRPO{Rollout: rl.RolloutOptions{GroupSize: 4, MaxCompletion: 8, Temperature: 1}}
}

// A GRPO fine-tune runs through the one loop with LoRA and in full (with
// a KL term to a copy of the base): one trace of the step, the rollout
// metrics and the policy's in each line, the held-out rewards at the
// evaluations, and a resumed run that draws and trains exactly what one
// run does: 2 updates and 2 more from the checkpoint give the arrays of 4
// in one go.
func TestGRPOFineTuneResumesExactly(t *testing.T) {
	base := grpoBase(t)
	trainFile, valid := writePrompts(t, "train.jsonl", 12), writePrompts(t, "valid.jsonl", 3)
	for _, method := range []string{MethodLoRA, MethodFull} {
		t.Run(method, func(t *testing.T) {
			ft := Config{Base: base, Method: method, Train: trainFile, Valid: valid}
			g := grpoSettings()
			if method == MethodFull {
				g.Beta = 0.05
			} else {
				ft.Rank, ft.Alpha, ft.Targets = 4, 8, []string{"attn", "mlp"}
			}
			cfg := runtest.FineTuneConfig(4)
			cfg.Batch, cfg.Accum, cfg.EvalEvery = 4, 2, 2 // 2 prompts × 4 completions per update
			whole := filepath.Join(t.TempDir(), "whole")
			sum, err := runGRPO(t, cfg, ft, g, whole, "")
			if err != nil {
				t.Fatal(err)
			}
			if sum.Traces != 1 {
				t.Errorf("the step traced %d times, want 1", sum.Traces)
			}
			lines, err := train.ReadMetrics(filepath.Join(whole, train.MetricsFile))
			if err != nil {
				t.Fatal(err)
			}
			evals := 0
			for _, m := range lines {
				if m.Step == 0 {
					evals++
					continue
				}
				for _, k := range []string{"reward", "reward/vowels", "advantage_std", "completion_len", "rollout_s", "clip_fraction", "kl", "ratio"} {
					if _, ok := m.Aux[k]; !ok {
						t.Errorf("step %d: no %s in %v", m.Step, k, m.Aux)
					}
				}
				if r := m.Aux["ratio"]; math.Abs(r-1) > 1e-6 {
					t.Errorf("step %d: ratio %g with one iteration, want 1", m.Step, r)
				}
				if (method == MethodFull) != (m.Aux["kl"] != 0) && m.Step > 1 {
					t.Errorf("step %d: kl %g (beta %g)", m.Step, m.Aux["kl"], g.Beta)
				}
				if m.ValLoss != nil {
					evals++
					if got := m.ValAux["reward"]; *m.ValLoss != -got || m.ValRows != 3 {
						t.Errorf("step %d: held-out loss %g, reward %g over %d prompts; want the negated reward over 3", m.Step, *m.ValLoss, got, m.ValRows)
					}
				}
			}
			if evals != 3 {
				t.Errorf("%d evaluations, want 3 (steps 0, 2, 4)", evals)
			}

			split := filepath.Join(t.TempDir(), "split")
			part, err := runGRPOUntil(t, cfg, ft, g, split, 2)
			if !errors.Is(err, train.ErrInterrupted) || part.Step != 2 {
				t.Fatalf("interrupted run: step %d, error %v; want step 2 and ErrInterrupted", part.Step, err)
			}
			if _, err := runGRPO(t, cfg, ft, g, split, part.LastCheckpoint); err != nil {
				t.Fatal(err)
			}
			adapter := method != MethodFull
			want := checkpointArrays(t, filepath.Join(whole, "checkpoints", "step-00000004"), adapter)
			got := checkpointArrays(t, filepath.Join(split, "checkpoints", "step-00000004"), adapter)
			for name, w := range want {
				for i := range w {
					if got[name][i] != w[i] {
						t.Fatalf("%s[%d]: resumed %g, one run %g", name, i, got[name][i], w[i])
					}
				}
			}
		})
	}
}

// With two iterations, an update's second pass over its completions
// compares the policy with the log-probabilities the engine sampled
// them with: with unchanged weights (learning rate 0) the ratio is 1 to
// float32 rounding and nothing is clipped.
func TestGRPOIterationsRatioOne(t *testing.T) {
	base := grpoBase(t)
	ft := Config{Base: base, Method: MethodLoRA, Train: writePrompts(t, "train.jsonl", 8), Rank: 4, Alpha: 8, Targets: []string{"attn"}}
	g := grpoSettings()
	g.Iterations = 2
	cfg := runtest.FineTuneConfig(4)
	cfg.Batch, cfg.Accum, cfg.EvalEvery = 8, 1, 0
	cfg.LR, cfg.MinLR, cfg.Warmup = 1e-30, 0, 0 // unchanged weights to float32 rounding
	dir := filepath.Join(t.TempDir(), "run")
	if _, err := runGRPO(t, cfg, ft, g, dir, ""); err != nil {
		t.Fatal(err)
	}
	lines, err := train.ReadMetrics(filepath.Join(dir, train.MetricsFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range lines {
		if r, c := m.Aux["ratio"], m.Aux["clip_fraction"]; math.Abs(r-1) > 1e-4 || c != 0 {
			t.Errorf("step %d: ratio %g, clipped %g; want 1 and 0", m.Step, r, c)
		}
	}
	if len(lines) != 4 {
		t.Errorf("%d metrics lines, want 4", len(lines))
	}
}

// A reward that fails stops the run with its error after a checkpoint
// of the updates done, which a resume continues from.
func TestGRPOFailingRewardCheckpoints(t *testing.T) {
	base := grpoBase(t)
	ft := Config{Base: base, Method: MethodLoRA, Train: writePrompts(t, "train.jsonl", 8), Rank: 4, Alpha: 8, Targets: []string{"attn"}}
	cfg := runtest.FineTuneConfig(4)
	cfg.Batch, cfg.Accum, cfg.EvalEvery = 8, 1, 0
	var calls atomic.Int64
	failing := rl.Weighted{Weight: 1, Scorer: rl.FromFunc("flaky", func(context.Context, rl.Prompt, rl.Completion) (float64, error) {
		if calls.Add(1) > 16 { // the third update's completions
			return 0, errors.New("the scorer's service is down")
		}
		return 0, nil
	})}
	dir := filepath.Join(t.TempDir(), "run")
	_, err := runGRPO(t, cfg, ft, grpoSettings(), dir, "", failing)
	if err == nil || !strings.Contains(err.Error(), "the scorer's service is down") || !strings.Contains(err.Error(), "step-00000002") {
		t.Fatalf("run error %v, want the reward's error naming the checkpoint of step 2", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "checkpoints", "step-00000002", "adapters.safetensors")); err != nil {
		t.Errorf("no checkpoint of the 2 updates done: %v", err)
	}
}

// Settings GRPO cannot train with are refused before anything runs.
func TestGRPOSettingsRefused(t *testing.T) {
	for _, c := range []struct {
		ft   Config
		want string
	}{
		{Config{GroupSize: 1}, "group size 1"},
		{Config{LossType: "ppo"}, `loss type "ppo"`},
		{Config{ScaleRewards: "rank"}, `advantage scale "rank"`},
		{Config{Epsilon: 1.5}, "epsilon 1.5"},
		{Config{Reward: "exact:x"}, `weight "x"`},
		{Config{AnswerPattern: "(("}, "answer pattern"},
		{Config{Iterations: -1}, "iterations -1"},
		{Config{Beta: -1}, "beta -1"},
		{Config{Pack: true}, "packing"},
	} {
		c.ft.Objective = GRPOName
		_, err := NewObjective(c.ft)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want one naming %q", c.ft, err, c.want)
		}
	}
	o, err := NewObjective(Config{Objective: GRPOName})
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Check(train.Config{Batch: 6, Accum: 1}); err == nil || !strings.Contains(err.Error(), "multiple of the group size 8") {
		t.Errorf("batch 6 with groups of 8: %v", err)
	}
}
