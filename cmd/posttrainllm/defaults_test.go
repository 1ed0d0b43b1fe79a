package main

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/checkpoint"
	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/finetune"
	"github.com/posttrainllm/posttrainllm/presets"
	"github.com/posttrainllm/posttrainllm/train"
)

// runState reads the run state of a run folder's newest checkpoint.
func runState(t *testing.T, run string) train.RunState {
	t.Helper()
	ck, err := checkpoint.Latest(run)
	if err != nil {
		t.Fatal(err)
	}
	st, err := train.ReadRunState(filepath.Join(ck, checkpoint.StateFile))
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// near reports whether a and b agree to a relative 1e-9 (JSON round trips).
func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(math.Abs(a), math.Abs(b)) }

// quick are the flags that keep a tiny run to a few seconds.
var quick = []string{"--eval-every", "0", "--no-progress"}

// --lr below the preset's min_lr trains: the floor keeps the preset's
// share of the peak, unless --min-lr sets it; likewise a full fine-tune.
func TestLRMovesMinLR(t *testing.T) {
	dir := t.TempDir()
	corpusFile := writeCorpus(t, dir, "corpus.txt", 40_000)
	tiny, err := presets.Load("tiny")
	if err != nil {
		t.Fatal(err)
	}
	ratio := tiny.MinLR / tiny.LR
	run := filepath.Join(dir, "run")
	mustRun(t, append([]string{"train", "--preset", "tiny", "--lr", "1e-5", "--steps", "4", "--corpus", corpusFile, "--out", run}, quick...)...)
	if c := runState(t, run).Config; c.LR != 1e-5 || !near(c.MinLR, 1e-5*ratio) {
		t.Errorf("--lr 1e-5: lr %g, min_lr %g; want 1e-05 and %g (the preset's ratio %g)", c.LR, c.MinLR, 1e-5*ratio, ratio)
	}
	own := filepath.Join(dir, "own")
	mustRun(t, append([]string{"train", "--preset", "tiny", "--lr", "1e-5", "--min-lr", "0", "--steps", "4", "--corpus", corpusFile, "--out", own}, quick...)...)
	if c := runState(t, own).Config; c.MinLR != 0 {
		t.Errorf("--min-lr 0: min_lr %g", c.MinLR)
	}
	ft := filepath.Join(dir, "full")
	mustRun(t, append([]string{"finetune", "--from", run, "--data", writeRecords(t, dir, "train.jsonl", 12), "--method", "full",
		"--lr", "1e-5", "--steps", "3", "--out", ft}, quick...)...)
	if c := runState(t, ft).Config; c.LR != 1e-5 || !(c.MinLR > 0 && c.MinLR < c.LR) {
		t.Errorf("finetune --method full --lr 1e-5: lr %g, min_lr %g; want a floor below the peak", c.LR, c.MinLR)
	}
}

// --tokenizer brings its vocabulary; --vocab still overrides it.
func TestTokenizerSetsVocabulary(t *testing.T) {
	dir := t.TempDir()
	corpusFile := writeCorpus(t, dir, "corpus.txt", 20_000)
	want, err := data.TokenizerVocabSize("gpt2")
	if err != nil {
		t.Fatal(err)
	}
	run := filepath.Join(dir, "gpt2")
	mustRun(t, append([]string{"train", "--preset", "tiny", "--tokenizer", "gpt2", "--steps", "1", "--corpus", corpusFile, "--out", run}, quick...)...)
	if m := runState(t, run).Config.Model; m.VocabSize != want || m.PadVocabTo != 0 {
		t.Errorf("--tokenizer gpt2: vocab_size %d, pad_vocab_to %d; want %d and the preset's 0", m.VocabSize, m.PadVocabTo, want)
	}
	padded := filepath.Join(dir, "padded")
	mustRun(t, append([]string{"train", "--preset", "tiny", "--tokenizer", "gpt2", "--vocab", "50304", "--steps", "1", "--corpus", corpusFile, "--out", padded}, quick...)...)
	if v := runState(t, padded).Config.Model.VocabSize; v != 50304 {
		t.Errorf("--tokenizer gpt2 --vocab 50304: vocab_size %d", v)
	}
}

// The command line that started a run, with --resume added (and more
// --steps), continues it; a preset that is not the run's is refused,
// naming the first setting that differs.
func TestResumeAcceptsTheRunsOwnPreset(t *testing.T) {
	dir := t.TempDir()
	corpusFile := writeCorpus(t, dir, "corpus.txt", 40_000)
	run := filepath.Join(dir, "run")
	start := append([]string{"train", "--preset", "tiny", "--corpus", corpusFile, "--out", run}, quick...)
	mustRun(t, append(start, "--steps", "4")...)
	mustRun(t, append(start, "--resume", run, "--steps", "6")...)
	if st := runState(t, run); st.Step != 6 {
		t.Fatalf("resumed with its own preset: at step %d, want 6", st.Step)
	}
	r := runCLI(t, append(start, "--resume", run, "--steps", "8", "--lr", "0.001")...)
	if r.code != 0 {
		t.Fatalf("the same flags on both sides: exit %d\n%s", r.code, r.stderr)
	}
	r = runCLI(t, "train", "--resume", run, "--preset", "small", "--steps", "10", "--corpus", corpusFile)
	checkCleanFailure(t, "--preset small with --resume of a tiny run", r, "--preset small", "d_model", "--d-model")
	lr := filepath.Join(dir, "lr")
	mustRun(t, append([]string{"train", "--preset", "tiny", "--lr", "0.001", "--steps", "2", "--corpus", corpusFile, "--out", lr}, quick...)...)
	r = runCLI(t, "train", "--resume", lr, "--preset", "tiny", "--steps", "4", "--corpus", corpusFile)
	checkCleanFailure(t, "--preset tiny without the run's --lr", r, "--preset tiny", "lr", "0.003", "0.001")
}

// The logged loss is the token-weighted mean of the interval's updates:
// logging every 3 updates gives the mean of what logging every update
// gives for those 3, weighted by their counted tokens in a fine-tune, and
// loss_last the third's.
func TestLoggedLossIsIntervalMean(t *testing.T) {
	dir := t.TempDir()
	corpusFile := writeCorpus(t, dir, "corpus.txt", 40_000)
	base := filepath.Join(dir, "base")
	args := func(out, every string) []string {
		return append([]string{"train", "--preset", "tiny", "--steps", "6", "--corpus", corpusFile, "--out", out, "--log-every", every}, quick...)
	}
	mustRun(t, args(base, "1")...)
	mustRun(t, args(filepath.Join(dir, "every3"), "3")...)
	checkIntervalMeans(t, readMetrics(t, base), readMetrics(t, filepath.Join(dir, "every3")), false)

	records := writeRecords(t, dir, "train.jsonl", 16)
	ftArgs := func(out, every string) []string {
		return append([]string{"finetune", "--from", base, "--data", records, "--steps", "6", "--out", out, "--log-every", every}, quick...)
	}
	mustRun(t, ftArgs(filepath.Join(dir, "ft1"), "1")...)
	mustRun(t, ftArgs(filepath.Join(dir, "ft3"), "3")...)
	checkIntervalMeans(t, readMetrics(t, filepath.Join(dir, "ft1")), readMetrics(t, filepath.Join(dir, "ft3")), true)
}

// checkIntervalMeans compares each line of every3 with the lines of every1
// that its interval covers.
func checkIntervalMeans(t *testing.T, every1, every3 []train.Metrics, weighted bool) {
	t.Helper()
	byStep := map[int]train.Metrics{}
	for _, m := range every1 {
		byStep[m.Step] = m
	}
	lines := 0
	for _, m := range every3 {
		if m.Step == 0 {
			continue
		}
		lines++
		var sum, n, plain float64
		for s := m.Step - 2; s <= m.Step; s++ {
			w := 1.0
			if weighted {
				w = byStep[s].CountedTokens
			}
			sum, n, plain = sum+byStep[s].LossLast*w, n+w, plain+byStep[s].LossLast/3
		}
		want := sum / n
		if math.Abs(m.Loss-want) > 1e-5*want || math.Abs(m.LossLast-byStep[m.Step].LossLast) > 1e-6*want {
			t.Errorf("step %d: loss %.6f, loss_last %.6f; want the interval's mean %.6f (plain mean %.6f) and the update's %.6f",
				m.Step, m.Loss, m.LossLast, want, plain, byStep[m.Step].LossLast)
		}
		if weighted && m.CountedTokens != n {
			t.Errorf("step %d: counted_tokens %g, want %g", m.Step, m.CountedTokens, n)
		}
		// The interval's counted targets over its time, which its 3 updates
		// over the same time give as steps_per_s: never above tokens_per_s.
		if want := m.CountedTokens * m.StepsPerS / 3; math.Abs(m.CountedTokensPerS-want) > 1e-9*want ||
			(weighted && (m.CountedTokensPerS <= 0 || m.CountedTokensPerS > m.TokensPerS)) {
			t.Errorf("step %d: counted_tokens_per_s %g, want %g (counted_tokens × steps_per_s / 3) within tokens_per_s %g",
				m.Step, m.CountedTokensPerS, want, m.TokensPerS)
		}
	}
	if lines != 2 {
		t.Fatalf("%d logged lines, want 2 (steps 3 and 6)", lines)
	}
}

// A fine-tune takes its method's learning rate, not the base run's
// pretraining rate, and says so in its header.
func TestFinetuneDefaultLearningRates(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(dir, "base")
	mustRun(t, append([]string{"train", "--preset", "tiny", "--steps", "2", "--corpus", writeCorpus(t, dir, "corpus.txt", 20_000), "--out", base}, quick...)...)
	records := writeRecords(t, dir, "train.jsonl", 8)
	for method, want := range map[string]float64{"lora": finetune.DefaultAdapterLR, "dora": finetune.DefaultAdapterLR, "full": finetune.DefaultFullLR} {
		out := filepath.Join(dir, method)
		r := mustRun(t, append([]string{"finetune", "--from", base, "--data", records, "--method", method, "--steps", "2", "--out", out}, quick...)...)
		c := runState(t, out).Config
		if c.LR != want || !near(c.MinLR, want*train.DefaultMinLRRatio) || c.LR == runState(t, base).Config.LR {
			t.Errorf("%s: lr %g, min_lr %g; want %g and a tenth of it", method, c.LR, c.MinLR, want)
		}
		if !strings.Contains(r.stdout, "the default of "+method+" fine-tunes") {
			t.Errorf("%s: the header does not name the default learning rate:\n%s", method, r.stdout)
		}
	}
	if want := []float64{1e-4, 2e-5}; finetune.DefaultAdapterLR != want[0] || finetune.DefaultFullLR != want[1] {
		t.Errorf("default rates %g and %g, want TRL's %g (LoRA) and %g (SFT)", finetune.DefaultAdapterLR, finetune.DefaultFullLR, want[0], want[1])
	}
}

// --context trains on rows of that length (at most the base's), kept by a
// resume, which accepts the fine-tune's own flags when they are its own.
func TestFinetuneContext(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(dir, "base")
	mustRun(t, append([]string{"train", "--preset", "tiny", "--steps", "2", "--corpus", writeCorpus(t, dir, "corpus.txt", 20_000), "--out", base}, quick...)...)
	records := writeRecords(t, dir, "train.jsonl", 8)
	out := filepath.Join(dir, "ft")
	start := append([]string{"finetune", "--from", base, "--data", records, "--context", "24", "--out", out}, quick...)
	r := mustRun(t, append(start, "--steps", "2")...)
	if !strings.Contains(r.stdout, "8 sequences of 24") {
		t.Errorf("--context 24: rows not of 24 tokens:\n%s", r.stdout)
	}
	ck, err := checkpoint.Latest(out)
	if err != nil {
		t.Fatal(err)
	}
	if ft, err := finetune.ReadConfig(ck); err != nil || ft.Context != 24 {
		t.Errorf("finetune.json context %d (%v), want 24", ft.Context, err)
	}
	r = mustRun(t, append(start, "--resume", out, "--steps", "4")...)
	if !strings.Contains(r.stdout, "of 24") || runState(t, out).Step != 4 {
		t.Errorf("resumed with its own flags: not at step 4 on rows of 24:\n%s", r.stdout)
	}
	r = runCLI(t, "finetune", "--resume", out, "--context", "32", "--steps", "6")
	checkCleanFailure(t, "--context 32 with --resume of a --context 24 fine-tune", r, "--context 32", "context 24")
	r = runCLI(t, "finetune", "--from", base, "--data", records, "--context", "65", "--out", filepath.Join(dir, "long"))
	checkCleanFailure(t, "--context above the base's", r, "--context 65", "64")
	if _, err := os.Stat(filepath.Join(dir, "long")); err == nil {
		t.Error("a refused --context created its run folder")
	}
}

// --epochs derives the steps from the training sequences, batch and
// accumulation, and says so.
func TestFinetuneEpochs(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(dir, "base")
	mustRun(t, append([]string{"train", "--preset", "tiny", "--steps", "2", "--corpus", writeCorpus(t, dir, "corpus.txt", 20_000), "--out", base}, quick...)...)
	records := writeRecords(t, dir, "train.jsonl", 10)
	out := filepath.Join(dir, "ft")
	r := mustRun(t, append([]string{"finetune", "--from", base, "--data", records, "--epochs", "3", "--batch", "2", "--accum", "2", "--out", out}, quick...)...)
	want := (3*10 + 3) / 4 // ceil(3 epochs × 10 sequences / (2 × 2))
	if st := runState(t, out); st.Step != want || st.Config.Steps != want {
		t.Errorf("--epochs 3 over 10 sequences, 4 per update: ran %d of %d steps, want %d", st.Step, st.Config.Steps, want)
	}
	if !strings.Contains(r.stdout, "3 epochs of 10 sequences") {
		t.Errorf("the header does not derive the steps:\n%s", r.stdout)
	}
	r = runCLI(t, "finetune", "--from", base, "--data", records, "--epochs", "2", "--steps", "5", "--out", filepath.Join(dir, "both"))
	checkCleanFailure(t, "--epochs with --steps", r, "--epochs", "--steps")
	r = runCLI(t, "finetune", "--from", base, "--data", records, "--epochs", "0", "--out", filepath.Join(dir, "zero"))
	checkCleanFailure(t, "--epochs 0", r, "--epochs 0")
}
