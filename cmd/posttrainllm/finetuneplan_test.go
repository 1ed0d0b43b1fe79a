package main

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/posttrainllm/posttrainllm/finetune"
	"github.com/posttrainllm/posttrainllm/train"
)

// finetune --micro-batch runs each update's rows in forward passes of that
// many: the header and every metrics line say so, and the losses are the
// automatic plan's (batch × accum as given on the CPU). A micro-batch that
// does not divide the update is refused before anything is written.
func TestFinetuneMicroBatch(t *testing.T) {
	dir := t.TempDir()
	base := pretrainBase(t, dir, 4)
	trainFile := writeRecords(t, dir, "train.jsonl", 24)
	common := []string{"finetune", "--from", base, "--data", trainFile, "--steps", "3", "--batch", "2", "--accum", "4",
		"--log-every", "1", "--no-progress"}
	auto, forced := filepath.Join(dir, "auto"), filepath.Join(dir, "forced")
	r := mustRun(t, append(common, "--out", auto)...)
	if !strings.Contains(r.stdout, "plan: micro-batch 2 × 4 accumulation steps (static") {
		t.Errorf("the automatic plan on the CPU is not the batch as given:\n%s", r.stdout)
	}
	r = mustRun(t, append(common, "--micro-batch", "8", "--out", forced)...)
	if !strings.Contains(r.stdout, "plan: micro-batch 8 × 1 accumulation step (forced)") {
		t.Errorf("finetune's output does not state the forced plan:\n%s", r.stdout)
	}
	am, fm := readMetrics(t, auto), readMetrics(t, forced)
	if len(am) != len(fm) || len(fm) != 3 {
		t.Fatalf("%d and %d metrics lines, want 3 each", len(am), len(fm))
	}
	for i, m := range fm {
		if m.MicroBatch != 8 || m.AccumSteps != 1 {
			t.Errorf("step %d ran micro-batch %d × %d, want 8 × 1", m.Step, m.MicroBatch, m.AccumSteps)
		}
		if d := m.Loss - am[i].Loss; d > 1e-4 || d < -1e-4 || m.CountedTokens != am[i].CountedTokens {
			t.Errorf("step %d: loss %.6f over %g counted tokens with micro-batch 8, %.6f over %g with the automatic plan",
				m.Step, m.Loss, m.CountedTokens, am[i].Loss, am[i].CountedTokens)
		}
	}
	bad := filepath.Join(dir, "bad")
	r = runCLI(t, append(common, "--micro-batch", "3", "--out", bad)...)
	checkCleanFailure(t, "--micro-batch 3", r, "invalid --micro-batch 3", "divisor of batch × accum = 2 × 4 = 8")
	if matches, _ := filepath.Glob(filepath.Join(bad, "*")); len(matches) != 0 {
		t.Errorf("a refused --micro-batch left %v", matches)
	}
}

// The settings' flags fill a Request, which records those given; a
// plan's refusal names its settings by their flags, those its reason
// names too: --steps, given or not, and a setting whose flag is not its
// key (--data for train).
func TestFinetuneSettingFlags(t *testing.T) {
	flags := func(args ...string) (*pflag.FlagSet, finetune.Request) {
		fs := pflag.NewFlagSet("finetune", pflag.ContinueOnError)
		var req finetune.Request
		addSettingFlags(fs, &req)
		ov := addConfigFlags(fs, finetuneSkipped...)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return fs, finetuneRequest(fs, req, ov)
	}
	fs, req := flags("--steps", "3", "--data", "more.jsonl", "--rank", "4", "--epochs", "2")
	if req.Settings.Train != "more.jsonl" || req.Settings.Rank != 4 || req.Settings.Alpha != 16 || req.Epochs != 2 ||
		!slices.Equal(req.Set, []string{"train", "rank"}) || !req.StepsSet || !req.EpochsSet {
		t.Errorf("request %+v: want --data, --rank and --epochs given, alpha 16 by default, steps set", req)
	}
	refusal := finetune.Plan{Checkpoint: "run/ck", Step: 4}.CheckRun(train.Config{Steps: 3})
	err := finetuneUsage(fs, refusal)
	want := "invalid --steps 3: nothing to do: run/ck is at step 4 and the run has 3 steps; pass --steps N with N > 4 to continue"
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != exitUsage || err.Error() != want {
		t.Errorf("steps given: %v, want a usage error %q", err, want)
	}
	fs, _ = flags()
	if err := finetuneUsage(fs, refusal); !strings.HasPrefix(err.Error(), "nothing to do:") {
		t.Errorf("steps not given: %v, want only the reason", err)
	}
	if got := settingFlag("train"); got != "data" {
		t.Errorf("the flag of train is %q, want data", got)
	}
}
