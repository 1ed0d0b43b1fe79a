package finetune

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/checkpoint"
	"github.com/posttrainllm/posttrainllm/internal/mlxtest"
	"github.com/posttrainllm/posttrainllm/internal/runtest"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/train"
)

// writePairs writes n rulePairs as a jsonl file of preference records.
func writePairs(t testing.TB, name string, seed uint64, n int) string {
	t.Helper()
	var b strings.Builder
	for _, r := range rulePairs(rand.New(rand.NewPCG(seed, 1)), n) {
		line, _ := json.Marshal(map[string]string{"prompt": r.Chosen.Prompt, "chosen": r.Chosen.Completion, "rejected": r.Rejected.Completion})
		b.Write(append(line, '\n'))
	}
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// checkpointArrays reads the trainable arrays of a fine-tune checkpoint.
func checkpointArrays(t testing.TB, dir string, adapter bool) map[string][]float32 {
	t.Helper()
	file := filepath.Join(dir, checkpoint.ModelFile)
	if adapter {
		file = filepath.Join(dir, checkpoint.AdapterFile)
	}
	out := map[string][]float32{}
	mlxtest.Run(t, func(t testing.TB) {
		arrays, _, err := mlx.LoadSafetensors(file)
		if err != nil {
			t.Fatal(err)
		}
		for name, a := range arrays {
			if out[name], err = mlx.AsType(a, mlx.Float32).Float32s(); err != nil {
				t.Fatal(err)
			}
		}
	})
	return out
}

// A preference fine-tune runs through the fine-tune loop with LoRA and in
// full: it traces once, logs the training and held-out rewards, margin
// and accuracy, starts a LoRA DPO at loss ln 2 with every held-out pair
// tied, keeps a full DPO's reference log-probabilities in the run folder
// (reused on resume, not recomputed), and resumes exactly: 3 updates and
// 3 more from the checkpoint give the arrays and losses of 6 in one go.
func TestPreferenceFineTuneResumesExactly(t *testing.T) {
	base := runtest.WriteBase(t)
	trainFile, valid := writePairs(t, "train.jsonl", 1, 24), writePairs(t, "valid.jsonl", 2, 6)
	for _, c := range []struct {
		method string
		obj    ObjectiveName
	}{{MethodLoRA, DPO}, {MethodFull, DPO}, {MethodDoRA, SimPO}, {MethodFull, ORPO}} {
		ft := Config{Base: base, Method: c.method, Train: trainFile, Valid: valid, Objective: c.obj}
		if c.method != MethodFull {
			ft.Rank, ft.Alpha, ft.Targets = 4, 8, []string{"attn", "mlp"}
		}
		cfg := runtest.FineTuneConfig(6)
		cfg.EvalEvery = 3
		if c.method == MethodFull {
			cfg.LR = 1e-3
		}
		whole := filepath.Join(t.TempDir(), "whole")
		sum := runFineTune(t, cfg, ft, whole, "")
		name := c.method + " " + string(c.obj)
		if sum.Traces != 1 {
			t.Errorf("%s: traced %d times, want 1", name, sum.Traces)
		}
		if sum.InitialValAux == nil || sum.ValAux == nil || sum.ValRows != 6 {
			t.Fatalf("%s: summary preference metrics %+v → %+v over %d pairs, want both over 6 pairs", name, sum.InitialValAux, sum.ValAux, sum.ValRows)
		}
		metrics, err := train.ReadMetrics(filepath.Join(whole, train.MetricsFile))
		if err != nil {
			t.Fatal(err)
		}
		if len(metrics) != 7 || metrics[0].ValAux == nil || metrics[1].Aux == nil || metrics[6].ValAux == nil {
			t.Fatalf("%s: %d metrics lines, want 7 with preference metrics on training lines and evaluations", name, len(metrics))
		}
		if p, n := metrics[1].Aux, metrics[1].CountedRows; n != float64(cfg.Batch*cfg.Accum/2) || len(p) != len(PreferenceAux) || math.Abs(p["margin"]-(p["reward_chosen"]-p["reward_rejected"])) > 1e-6 {
			t.Errorf("%s: first training line's preference %+v over %g pairs; want %d pairs, all of %v and margin = chosen − rejected",
				name, p, n, cfg.Batch*cfg.Accum/2, PreferenceAux)
		}
		if vals, err := train.MetricValues(metrics[6]); err != nil || vals["val_aux_accuracy"] != metrics[6].ValAux["accuracy"] || vals["aux_margin"] != metrics[6].Aux["margin"] {
			t.Errorf("%s: TensorBoard values %v (%v), want the preference metrics as val_aux_accuracy and aux_margin", name, vals, err)
		}
		if c.obj == DPO {
			if v := sum.InitialValAux; math.Abs(sum.InitialValLoss-math.Ln2) > 1e-5 || v["accuracy"] != 0.5 || v["margin"] != 0 {
				t.Errorf("%s: held-out DPO at the start %+v, loss %g; want loss ln 2, margin 0 and every pair tied", name, v, sum.InitialValLoss)
			}
		}
		refFile := filepath.Join(whole, ReferenceFile)
		_, statErr := os.Stat(refFile)
		if wantRef := c.method == MethodFull && c.obj == DPO; wantRef != (statErr == nil) {
			t.Errorf("%s: reference file present %v, want %v", name, statErr == nil, wantRef)
		}

		split := filepath.Join(t.TempDir(), "split")
		ctx, cancel := context.WithCancel(context.Background())
		f, err := New(cfg, ft, split)
		if err != nil {
			t.Fatal(err)
		}
		f.Hooks.OnLog = func(m train.Metrics) {
			if m.Step == 3 {
				cancel()
			}
		}
		part, err := f.Run(ctx, "")
		cancel()
		if !errors.Is(err, train.ErrInterrupted) || part.Step != 3 {
			t.Fatalf("%s: interrupted run: step %d, error %v; want step 3 and ErrInterrupted", name, part.Step, err)
		}
		var refInfo os.FileInfo
		if statErr == nil {
			if refInfo, err = os.Stat(filepath.Join(split, ReferenceFile)); err != nil {
				t.Fatal(err)
			}
		}
		resumed := runFineTune(t, cfg, ft, split, part.LastCheckpoint)
		if resumed.StartStep != 3 || resumed.Step != 6 {
			t.Fatalf("%s: resumed steps %d-%d, want 3-6", name, resumed.StartStep, resumed.Step)
		}
		if resumed.Loss != sum.Loss || resumed.ValLoss != sum.ValLoss || !maps.Equal(resumed.ValAux, sum.ValAux) {
			t.Errorf("%s: resumed run ends at loss %v, held-out %+v; the whole run at %v, %+v", name, resumed.Loss, resumed.ValAux, sum.Loss, sum.ValAux)
		}
		if refInfo != nil {
			again, err := os.Stat(filepath.Join(split, ReferenceFile))
			if err != nil || !again.ModTime().Equal(refInfo.ModTime()) {
				t.Errorf("%s: the resumed run rewrote the reference file (%v)", name, err)
			}
		}
		a := checkpointArrays(t, sum.LastCheckpoint, c.method != MethodFull)
		b := checkpointArrays(t, resumed.LastCheckpoint, c.method != MethodFull)
		if len(a) == 0 || len(a) != len(b) {
			t.Fatalf("%s: %d and %d arrays", name, len(a), len(b))
		}
		for k, v := range a {
			if !slices.Equal(v, b[k]) {
				t.Errorf("%s: %s differs after resuming", name, k)
				break
			}
		}
	}
}

// A preference fine-tune refuses an odd batch, which would split a pair,
// and a checkpoint resumes only under the objective it was trained with.
func TestPreferenceFineTuneRefusals(t *testing.T) {
	base := runtest.WriteBase(t)
	ft := Config{Base: base, Method: MethodLoRA, Rank: 4, Alpha: 8, Targets: []string{"attn"},
		Train: writePairs(t, "train.jsonl", 1, 8), Objective: DPO}
	cfg := runtest.FineTuneConfig(2)
	cfg.EvalEvery, cfg.Warmup = 0, 1
	odd := cfg
	odd.Batch = 3
	if _, err := New(odd, ft, t.TempDir()); err == nil || !strings.Contains(err.Error(), "even") {
		t.Errorf("odd batch: %v", err)
	}
	sft := ft
	sft.Objective = ""
	if _, err := New(cfg, sft, t.TempDir()); err == nil || !strings.Contains(err.Error(), "train.jsonl:1") {
		t.Errorf("preference records as SFT records: %v, want an error naming train.jsonl:1", err)
	}
	dir := filepath.Join(t.TempDir(), "run")
	sum := runFineTune(t, cfg, ft, dir, "")
	ipo := ft
	ipo.Objective = IPO
	cfg.Steps = 4
	f, err := New(cfg, ipo, dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Run(context.Background(), sum.LastCheckpoint); err == nil || !strings.Contains(err.Error(), "same objective") {
		t.Errorf("resuming a DPO checkpoint as IPO: %v", err)
	}
}

// Two ranks of a full DPO fine-tune (precomputed reference) over a
// loopback ring, batch B each, log the losses, gradient norms and
// training and held-out preference metrics of one process with batch 2B:
// each rank draws whole pairs and normalises by the pairs of both.
func TestDataParallelPreferenceFineTuneMatchesDoubledBatch(t *testing.T) {
	cfg := runtest.FineTuneConfig(4)
	cfg.Batch, cfg.Accum, cfg.GradClip, cfg.EvalEvery, cfg.LR = 8, 2, 0.5, 2, 1e-3
	ft := Config{Base: runtest.WriteBase(t), Method: MethodFull, Objective: DPO,
		Train: writePairs(t, "train.jsonl", 1, 24), Valid: writePairs(t, "valid.jsonl", 2, 6)}
	single := filepath.Join(t.TempDir(), "single")
	runFineTune(t, cfg, ft, single, "")

	_, got := runFineTuneRanks(t, cfg, ft)
	want := readMetrics(t, single)
	if len(got) != len(want) || len(got) != cfg.Steps+1 {
		t.Fatalf("the ranks logged %d lines, the single process %d; want %d", len(got), len(want), cfg.Steps+1)
	}
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-5*math.Max(1, math.Abs(b)) }
	pref := func(p map[string]float64, rows float64) []float64 {
		if p == nil {
			return nil
		}
		out := []float64{rows}
		for _, name := range PreferenceAux {
			out = append(out, p[name])
		}
		return out
	}
	for i, m := range got {
		w := want[i]
		if !near(m.Loss, w.Loss) || !near(m.GradNorm, w.GradNorm) {
			t.Errorf("step %d: loss %.7f, grad norm %.7f; the doubled batch's %.7f, %.7f", m.Step, m.Loss, m.GradNorm, w.Loss, w.GradNorm)
		}
		for _, p := range [][2][]float64{{pref(m.Aux, m.CountedRows), pref(w.Aux, w.CountedRows)}, {pref(m.ValAux, float64(m.ValRows)), pref(w.ValAux, float64(w.ValRows))}} {
			a, b := p[0], p[1]
			if len(a) != len(b) {
				t.Errorf("step %d: preference metrics %v, the doubled batch's %v", m.Step, a, b)
				continue
			}
			for k := range a {
				if !near(a[k], b[k]) {
					t.Errorf("step %d: preference metrics %v, the doubled batch's %v", m.Step, a, b)
					break
				}
			}
		}
	}
}

// The micro-batch probe of a preference fine-tune runs its row step on
// pairs, and refuses an odd micro-batch, which would split a pair, so that
// --micro-batch auto only picks even ones.
func TestPreferenceProbe(t *testing.T) {
	base := runtest.WriteBase(t)
	for _, method := range []string{MethodLoRA, MethodFull} {
		ft := Config{Base: base, Method: method, Objective: DPO, Train: writePairs(t, "train.jsonl", 1, 8)}
		if method == MethodLoRA {
			ft.Rank, ft.Alpha, ft.Targets = 4, 8, []string{"attn"}
		}
		cfg := runtest.FineTuneConfig(2)
		cfg.Warmup = 1
		f, err := New(cfg, ft, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		probe := (&fineTuneTask{f: f}).probe()
		var peak uint64
		err = mlx.Do(func() error {
			c := f.Config
			var err error
			if peak, err = probe.Peak(c); err != nil {
				return err
			}
			c.Batch = 3
			if _, err := probe.Peak(c); err == nil || !strings.Contains(err.Error(), "micro-batch 3") || !strings.Contains(err.Error(), "even") {
				t.Errorf("%s: probing an odd micro-batch: %v", method, err)
			}
			return nil
		})
		if err != nil || peak == 0 {
			t.Errorf("%s: probe peak %d, %v", method, peak, err)
		}
	}
}
