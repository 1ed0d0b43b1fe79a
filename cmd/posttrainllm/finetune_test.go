package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/checkpoint"
	"github.com/posttrainllm/posttrainllm/runfolder"
)

// writeRecords writes "continue this line" records, one per line of the
// synthetic corpus text.
func writeRecords(t *testing.T, dir, name string, lines int) string {
	t.Helper()
	text, err := os.ReadFile(writeCorpus(t, t.TempDir(), "c.txt", 80*lines))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, l := range strings.Split(string(text), "\n")[:lines] {
		f := strings.Fields(l)
		rec, _ := json.Marshal(map[string]string{"prompt": strings.Join(f[:3], " ") + " ", "completion": strings.Join(f[3:], " ") + "\n"})
		b.Write(append(rec, '\n'))
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// A LoRA fine-tune from the command line writes a run folder with small
// adapter checkpoints, metrics and a plot, resumes, samples with its
// adapters, and fuses into a checkpoint that samples the same text.
func TestFinetuneResumeSampleFuse(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(dir, "base")
	mustRun(t, "train", "--preset", "tiny", "--steps", "10", "--corpus", writeCorpus(t, dir, "corpus.txt", 40_000),
		"--out", base, "--no-progress")
	trainFile, validFile := writeRecords(t, dir, "train.jsonl", 40), writeRecords(t, dir, "valid.jsonl", 8)
	out := filepath.Join(dir, "lora")
	r := mustRun(t, "finetune", "--from", base, "--data", trainFile, "--valid", validFile, "--out", out,
		"--steps", "6", "--eval-every", "3", "--targets", "attn,mlp", "--no-progress")
	for _, want := range []string{"trainable: ", "counted targets", "1 trace(s)", "held-out loss"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("finetune output lacks %q:\n%s", want, r.stdout)
		}
	}
	ck, err := checkpoint.Latest(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{checkpoint.AdapterFile, checkpoint.FineTuneFile, checkpoint.OptimizerFile, checkpoint.StateFile} {
		if _, err := os.Stat(filepath.Join(ck, f)); err != nil {
			t.Errorf("adapter checkpoint lacks %s: %v", f, err)
		}
	}
	if _, err := os.Stat(filepath.Join(ck, checkpoint.ModelFile)); err == nil {
		t.Errorf("adapter checkpoint %s holds a whole model", ck)
	}
	checkPNG(t, filepath.Join(out, plotFile))
	vals := 0
	for _, m := range readMetrics(t, out) {
		if m.ValLoss != nil {
			vals++
		}
	}
	if vals != 3 { // steps 0, 3, 6
		t.Errorf("%d held-out losses in metrics.jsonl, want 3", vals)
	}

	r = mustRun(t, "finetune", "--resume", out, "--steps", "8", "--no-progress")
	if !strings.Contains(r.stdout, "resuming at step 6") {
		t.Errorf("resume does not say where it starts:\n%s", r.stdout)
	}
	r = runCLI(t, "finetune", "--resume", out, "--steps", "10", "--rank", "4")
	checkCleanFailure(t, "--rank with --resume", r, "--rank", "--resume")

	sample := []string{"--prompt", "the quick ", "--tokens", "20", "--temperature", "0"}
	adapted := mustRun(t, append([]string{"sample", "--adapter", out}, sample...)...).stdout
	fused := filepath.Join(dir, "fused")
	mustRun(t, "fuse", "--adapter", out, "--out", fused)
	if got := mustRun(t, append([]string{"sample", "--from", fused}, sample...)...).stdout; got != adapted {
		t.Errorf("the fused checkpoint samples %q, base + adapters %q", got, adapted)
	}
	r = runCLI(t, "sample", "--adapter", base, "--prompt", "x")
	checkCleanFailure(t, "sample --adapter on a pretraining run", r, "no fine-tune checkpoint")
}

// Bad fine-tune input fails with one line naming the problem, and writes
// nothing.
func TestFinetuneBadInputCreatesNothing(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(dir, "base")
	mustRun(t, "train", "--preset", "tiny", "--steps", "2", "--corpus", writeCorpus(t, dir, "corpus.txt", 20_000),
		"--out", base, "--no-progress")
	good := writeRecords(t, dir, "train.jsonl", 10)
	bad := filepath.Join(dir, "bad.jsonl")
	if err := os.WriteFile(bad, []byte("{\"text\": \"fine\"}\n{\"prompt\": \"no completion\"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--from", base, "--data", bad}, []string{"bad.jsonl:2", `"completion"`}},
		{[]string{"--from", base, "--data", filepath.Join(dir, "missing.jsonl")}, []string{"--data", "missing.jsonl"}},
		{[]string{"--from", base, "--data", good, "--method", "qlora"}, []string{"qlora", "lora, dora, full"}},
		{[]string{"--from", base, "--data", good, "--targets", "attn,wz"}, []string{"target wz"}},
		{[]string{"--from", base, "--data", good, "--rank", "0"}, []string{"rank 0"}},
		{[]string{"--from", filepath.Join(dir, "nobase"), "--data", good}, []string{"--from", "nobase"}},
		{[]string{"--data", good}, []string{"--from"}},
		{[]string{"--from", base, "--data", good, "--optimizer", "sophia"}, []string{`optimizer "sophia"`, "adamw"}},
	} {
		r := runCLI(t, append(append([]string{"finetune", "--out", out}, tc.args...), "--steps", "3")...)
		checkCleanFailure(t, strings.Join(tc.args, " "), r, tc.want...)
		if _, err := os.Stat(out); err == nil {
			t.Fatalf("%s: created %s", strings.Join(tc.args, " "), out)
		}
	}
	checkCleanFailure(t, "fuse without --adapter", runCLI(t, "fuse", "--out", out), "--adapter")
}

// fuse --quantize writes a quantized base: adapters fine-tune over it and
// it samples, while a full fine-tune or --quantize over it fails with one
// line naming the quantization and creates nothing; bad --quantize values
// for fuse are refused.
func TestFuseQuantizeMakesAQuantizedBase(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(dir, "base")
	mustRun(t, "train", "--preset", "tiny", "--steps", "2", "--corpus", writeCorpus(t, dir, "corpus.txt", 20_000),
		"--out", base, "--no-progress")
	data := writeRecords(t, dir, "train.jsonl", 10)
	lora := filepath.Join(dir, "lora")
	mustRun(t, "finetune", "--from", base, "--data", data, "--out", lora, "--steps", "2", "--warmup", "1", "--no-progress")
	fused := filepath.Join(dir, "fused-q4")
	mustRun(t, "fuse", "--adapter", lora, "--out", fused, "--quantize", "4", "--q-group-size", "32")
	ck, err := checkpoint.Latest(fused)
	if err != nil {
		t.Fatal(err)
	}
	if q, err := runfolder.CheckpointQuantization(ck); err != nil || q != "4-bit, groups of 32" {
		t.Fatalf("fuse --quantize 4 --q-group-size 32 wrote quantization %q (%v)", q, err)
	}
	mustRun(t, "sample", "--from", fused, "--prompt", "the ", "--tokens", "5")
	mustRun(t, "finetune", "--from", fused, "--data", data, "--out", filepath.Join(dir, "qlora"), "--steps", "2", "--warmup", "1", "--no-progress")
	out := filepath.Join(dir, "out")
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"finetune", "--from", fused, "--data", data, "--method", "full"}, []string{"--method full", "4-bit, groups of 32"}},
		{[]string{"finetune", "--from", fused, "--data", data, "--quantize", "8"}, []string{"--quantize 8", "quantized already"}},
		{[]string{"fuse", "--adapter", lora, "--quantize", "7"}, []string{"--quantize", "bits 7"}},
		{[]string{"fuse", "--adapter", lora, "--q-group-size", "32"}, []string{"q_group_size 32 without quantize"}},
	} {
		args := append(append([]string{}, tc.args...), "--out", out)
		if tc.args[0] == "finetune" {
			args = append(args, "--steps", "3")
		}
		r := runCLI(t, args...)
		checkCleanFailure(t, strings.Join(tc.args, " "), r, tc.want...)
		if _, err := os.Stat(out); err == nil {
			t.Fatalf("%s: created %s", strings.Join(tc.args, " "), out)
		}
	}
}
