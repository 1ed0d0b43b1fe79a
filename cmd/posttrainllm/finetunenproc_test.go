package main

import (
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/checkpoint"
	"github.com/posttrainllm/posttrainllm/internal/mlxtest"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/train"
)

// adapterParams reads the adapters of run folder dir's newest checkpoint,
// by name, and its step.
func adapterParams(t *testing.T, dir string) (map[string][]float32, int) {
	t.Helper()
	ck, err := checkpoint.Latest(dir)
	if err != nil {
		t.Fatal(err)
	}
	st, err := train.ReadRunState(filepath.Join(ck, checkpoint.StateFile))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]float32{}
	mlxtest.Run(t, func(t testing.TB) {
		arrays, _, err := mlx.LoadSafetensors(filepath.Join(ck, checkpoint.AdapterFile))
		if err != nil {
			t.Fatal(err)
		}
		for name, a := range arrays {
			if out[name], err = a.Float32s(); err != nil {
				t.Fatal(err)
			}
			a.Free()
		}
	})
	return out, st.Step
}

// pretrainBase trains the tiny preset for steps updates on a synthetic
// corpus into dir/base, the base of a fine-tune, and returns that folder.
func pretrainBase(t *testing.T, dir string, steps int) string {
	t.Helper()
	base := filepath.Join(dir, "base")
	mustRun(t, "train", "--preset", "tiny", "--steps", strconv.Itoa(steps), "--corpus", writeCorpus(t, dir, "corpus.txt", 40_000),
		"--out", base, "--no-progress")
	return base
}

// finetune --nproc 2 --batch 4 logs the losses and held-out losses of one
// process with --batch 8 and writes its adapters (rank 0 alone prints and
// writes); resumed with --nproc 2 it still matches the single process
// resumed.
func TestFinetuneNprocMatchesDoubledBatch(t *testing.T) {
	dir := t.TempDir()
	base := pretrainBase(t, dir, 10)
	trainFile, validFile := writeRecords(t, dir, "train.jsonl", 40), writeRecords(t, dir, "valid.jsonl", 8)
	common := []string{"finetune", "--from", base, "--data", trainFile, "--valid", validFile, "--steps", "4",
		"--accum", "2", "--log-every", "1", "--eval-every", "2", "--targets", "attn,mlp", "--no-progress"}
	single, dp := filepath.Join(dir, "single"), filepath.Join(dir, "dp")
	mustRun(t, append(common, "--batch", "8", "--out", single)...)
	r := mustRun(t, append(common, "--batch", "4", "--nproc", "2", "--out", dp)...)
	if !strings.Contains(r.stdout, "data-parallel: 2 ranks (ring)") {
		t.Errorf("the header does not say the fine-tune is data-parallel:\n%s", r.stdout)
	}
	if n := strings.Count(r.stdout, "done: steps 1-4"); n != 1 {
		t.Errorf("the summary appears %d times, want once (rank 0 alone prints):\n%s", n, r.stdout)
	}
	compareFinetunes(t, "2 ranks × batch 4", dp, single, 4)

	mustRun(t, "finetune", "--resume", single, "--steps", "6", "--no-progress")
	mustRun(t, "finetune", "--resume", dp, "--steps", "6", "--nproc", "2", "--no-progress")
	compareFinetunes(t, "2 ranks resumed to step 6", dp, single, 6)
}

// compareFinetunes fails the test unless run folder got's newest
// checkpoint is at step and its adapters and metrics lines agree with
// want's to a float tolerance.
func compareFinetunes(t *testing.T, what, got, want string, step int) {
	t.Helper()
	wa, _ := adapterParams(t, want)
	ga, s := adapterParams(t, got)
	if s != step {
		t.Fatalf("%s: checkpoint at step %d, want %d", what, s, step)
	}
	sameParams(t, what, ga, wa)
	wm, gm := readMetrics(t, want), readMetrics(t, got)
	if len(gm) != len(wm) {
		t.Fatalf("%s: metrics has %d lines, the single process's %d", what, len(gm), len(wm))
	}
	for i := range wm {
		g, w := gm[i], wm[i]
		if g.Step != w.Step || math.Abs(g.Loss-w.Loss) > 1e-4 || g.CountedTokens != w.CountedTokens ||
			(g.ValLoss == nil) != (w.ValLoss == nil) || g.ValLoss != nil && math.Abs(*g.ValLoss-*w.ValLoss) > 1e-4 {
			t.Fatalf("%s: metrics line %d: step %d loss %.5f over %g counted tokens, the single process's step %d loss %.5f over %g",
				what, i, g.Step, g.Loss, g.CountedTokens, w.Step, w.Loss, w.CountedTokens)
		}
	}
}
