package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/checkpoint"
)

// evalText is a small corpus of varied lines, written by the test: 40,000
// bytes, so the byte tokenizer's held-out tenth is 4,000 tokens.
func evalText() string {
	words := []string{"the", "king", "and", "his", "men", "rode", "north", "at", "dawn", "while", "rain", "fell", "on", "stone"}
	var b strings.Builder
	for i := 0; b.Len() < 40_000; i++ {
		b.WriteString(words[(i*5+i/7)%len(words)])
		if i%11 == 10 {
			b.WriteString(".\n")
		} else {
			b.WriteByte(' ')
		}
	}
	return b.String()[:40_000]
}

// tinyEvalRun trains a very small model for 20 steps on evalText and
// returns the run folder and the corpus file.
func tinyEvalRun(t *testing.T) (run, corpusFile string) {
	t.Helper()
	dir := t.TempDir()
	corpusFile = filepath.Join(dir, "corpus.txt")
	if err := os.WriteFile(corpusFile, []byte(evalText()), 0o644); err != nil {
		t.Fatal(err)
	}
	run = filepath.Join(dir, "run")
	r := mustRun(t, "train", "--preset", "tiny", "--corpus", corpusFile, "--out", run, "--no-progress",
		"--d-model", "32", "--layers", "1", "--context", "32", "--batch", "4",
		"--steps", "20", "--warmup", "2", "--eval-every", "10", "--eval-tokens", "1000")
	if !strings.Contains(r.stdout, "held-out loss every 10 steps on 1024 tokens") {
		t.Fatalf("train does not say how many tokens an evaluation covers:\n%s", r.stdout)
	}
	return run, corpusFile
}

// evalOutput is the part of eval --json the tests read.
type evalOutput struct {
	Checkpoint  string   `json:"checkpoint"`
	Step        int      `json:"step"`
	Split       string   `json:"split"`
	SplitTokens int      `json:"split_tokens"`
	Tokens      int      `json:"tokens"`
	Windows     int      `json:"windows"`
	Sampled     bool     `json:"sampled"`
	Seed        *uint64  `json:"seed"`
	Loss        float64  `json:"loss"`
	Perplexity  *float64 `json:"perplexity"`
	ZLoss       *float64 `json:"z_loss"`
}

func evalJSONOf(t *testing.T, args ...string) evalOutput {
	t.Helper()
	r := mustRun(t, append([]string{"eval", "--json"}, args...)...)
	var out evalOutput
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("eval --json printed no JSON object: %v\n%s", err, r.stdout)
	}
	if out.Perplexity == nil || math.Abs(*out.Perplexity-math.Exp(out.Loss)) > 1e-9**out.Perplexity {
		t.Fatalf("perplexity %v, loss %v: want exp(loss)", out.Perplexity, out.Loss)
	}
	if !(out.Loss > 0) || out.Loss > 10 {
		t.Fatalf("loss %v, want a cross-entropy between 0 and ln(256) or so", out.Loss)
	}
	return out
}

// TestEvalCommand trains a tiny run and evaluates it: every token of the
// held-out split (4,000 tokens, 3,999 predictions in 125 windows of 32),
// of the training split through a checkpoint directory, and of another
// file; and random windows that reproduce the val_loss the run logged.
func TestEvalCommand(t *testing.T) {
	run, corpusFile := tinyEvalRun(t)

	r := mustRun(t, "eval", "--from", run)
	for _, want := range []string{"step-00000020 (step 20)", "val split of 4000 tokens", "evaluated:  3999 tokens",
		"125 windows of 32", "loss:", "nats/token", "perplexity:"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("eval does not print %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "z-loss") {
		t.Fatalf("eval prints a z-loss term for a model without z-loss:\n%s", r.stdout)
	}

	val := evalJSONOf(t, "--from", run)
	if val.Split != "val" || val.SplitTokens != 4000 || val.Tokens != 3999 || val.Windows != 125 || val.Sampled ||
		val.Step != 20 || val.ZLoss != nil || val.Seed != nil {
		t.Fatalf("eval --json of the held-out split: %+v", val)
	}
	// The batch only groups the windows.
	if b3 := evalJSONOf(t, "--from", run, "--batch", "3"); b3.Tokens != val.Tokens || math.Abs(b3.Loss-val.Loss) > 1e-5*val.Loss {
		t.Fatalf("--batch 3: %d tokens, loss %.7f; batch 4: %d, %.7f", b3.Tokens, b3.Loss, val.Tokens, val.Loss)
	}

	ck := filepath.Join(checkpoint.Root(run), "step-00000020")
	tr := evalJSONOf(t, "--from", ck, "--split", "train")
	if tr.Split != "train" || tr.SplitTokens != 36000 || tr.Tokens != 35999 || tr.Checkpoint != ck {
		t.Fatalf("eval --split train of a checkpoint directory: %+v", tr)
	}
	all := evalJSONOf(t, "--from", run, "--corpus", corpusFile)
	if all.Split != "all" || all.Tokens != 39999 {
		t.Fatalf("eval --corpus FILE: %+v, want every token of the file", all)
	}
	// The whole is the token-weighted mean of its parts, up to the one
	// window that spans the boundary.
	if mix := (tr.Loss*35999 + val.Loss*3999) / 39998; math.Abs(all.Loss-mix) > 0.02*mix {
		t.Fatalf("loss over the whole file %.4f, over its splits %.4f and %.4f", all.Loss, tr.Loss, val.Loss)
	}

	// --eval-tokens draws the windows training evaluated on: the result is
	// the val_loss logged at step 20.
	ms := readMetrics(t, run)
	last := ms[len(ms)-1]
	if last.Step != 20 || last.ValLoss == nil || last.ValTokens != 1024 {
		t.Fatalf("last metrics line: %+v, want step 20 with val_loss and val_tokens 1024", last)
	}
	sampled := evalJSONOf(t, "--from", run, "--eval-tokens", "1000")
	if !sampled.Sampled || sampled.Tokens != 1024 || sampled.Seed == nil || *sampled.Seed != 2 ||
		math.Abs(sampled.Loss-*last.ValLoss) > 1e-6**last.ValLoss {
		t.Fatalf("eval --eval-tokens 1000: %+v; the run logged val_loss %.7f on %d tokens", sampled, *last.ValLoss, last.ValTokens)
	}
	if other := evalJSONOf(t, "--from", run, "--eval-tokens", "1000", "--seed", "9"); other.Loss == sampled.Loss {
		t.Fatalf("--seed 9 gave the loss of the training windows, %.7f", other.Loss)
	}
}

// Bad input exits with the usage status and one line naming the problem.
func TestEvalBadInput(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file.txt")
	if err := os.WriteFile(file, []byte("not a run"), 0o644); err != nil {
		t.Fatal(err)
	}
	run := filepath.Join(dir, "run")
	ck := filepath.Join(checkpoint.Root(run), "step-00000001")
	if err := os.MkdirAll(ck, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ck, checkpoint.StateFile), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args []string
		code int
		want []string
	}{
		{[]string{"eval"}, exitUsage, []string{"--from", "run folder"}},
		{[]string{"eval", "--from", filepath.Join(dir, "missing")}, exitUsage, []string{"--from", "missing", "no such file"}},
		{[]string{"eval", "--from", file}, exitUsage, []string{"--from", "file.txt", "is a file"}},
		{[]string{"eval", "--from", dir}, exitUsage, []string{"--from", "no checkpoint"}},
		{[]string{"eval", "--from", run, "--split", "test"}, exitUsage, []string{"--split test", "val, train or all"}},
		{[]string{"eval", "--from", run, "--batch", "0"}, exitUsage, []string{"--batch 0"}},
		{[]string{"eval", "--from", run, "--eval-tokens", "-5"}, exitUsage, []string{"--eval-tokens -5"}},
		{[]string{"eval", "--from", run, "--seed", "3"}, exitUsage, []string{"--seed", "--eval-tokens"}},
		{[]string{"eval", "--from", run, "--corpus", filepath.Join(dir, "gone.txt")}, exitUsage, []string{"--corpus", "gone.txt"}},
		{[]string{"eval", "--from", run, "--device", "tpu"}, exitUsage, []string{"--device tpu"}},
		{[]string{"eval", "--from", run}, 1, []string{"state.json"}}, // a checkpoint whose state.json is empty
	}
	for _, c := range cases {
		r := runCLI(t, c.args...)
		if r.code != c.code {
			t.Errorf("%v: exit %d, want %d (stderr %q)", c.args, r.code, c.code, r.stderr)
			continue
		}
		checkErrorLine(t, fmt.Sprint(c.args), r.stderr, c.want...)
	}
}
