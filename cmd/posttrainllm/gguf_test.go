package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/checkpoint"
	"github.com/posttrainllm/posttrainllm/internal/realmodel"
	"github.com/posttrainllm/posttrainllm/train"
)

// The real model as a GGUF file: import makes a run with the tokenizer
// files its metadata describes and no optimizer state, and sample gives
// the same greedy text from the run, from the file directly and from the
// Hugging Face folder an independent script converted the file to.
func TestImportAndSampleGGUF(t *testing.T) {
	gguf, folder := realmodel.GGUF(t), realmodel.Folder(t)
	run := filepath.Join(t.TempDir(), "smollm2")
	r := mustRun(t, "import", gguf, "--out", run)
	if !strings.Contains(r.stdout, "llama") || !strings.Contains(r.stdout, "hf tokenizer") {
		t.Fatalf("import says %q; want the llama family and the hf tokenizer", r.stdout)
	}
	ck, err := checkpoint.Latest(run)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(ck, checkpoint.OptimizerFile)); err == nil {
		t.Errorf("import wrote %s; an imported model has no optimizer state", checkpoint.OptimizerFile)
	}
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json", "generation_config.json"} {
		if _, err := os.Stat(filepath.Join(run, train.TokenizerDir, f)); err != nil {
			t.Errorf("import made no %s: %v", f, err)
		}
	}
	args := []string{"--prompt", "The capital of France is", "--tokens", "8", "--temperature", "0"}
	want := mustRun(t, append([]string{"sample", "--from", folder}, args...)...).stdout
	if !strings.HasPrefix(want, "The capital of France is") || len(want) < 30 {
		t.Fatalf("the folder's greedy sample %q does not continue the prompt", want)
	}
	for _, from := range []string{run, gguf} {
		if got := mustRun(t, append([]string{"sample", "--from", from}, args...)...).stdout; got != want {
			t.Errorf("sample --from %s: %q, the converted folder gives %q", from, got, want)
		}
	}
}

// A file that is not a model is refused with one line naming it, and
// import writes nothing.
func TestImportRejectsBadGGUF(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.gguf")
	if err := os.WriteFile(bad, []byte("GGUF\x03\x00\x00\x00 and then nothing useful"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "run")
	r := runCLI(t, "import", bad, "--out", out)
	if r.code == 0 {
		t.Fatal("import of a corrupt GGUF file succeeded")
	}
	checkErrorLine(t, "import of a corrupt GGUF", r.stderr, "bad.gguf")
	if _, err := os.Stat(out); err == nil {
		t.Errorf("a failed import left %s", out)
	}
}

// Import writes no optimizer state; train --resume from the imported run
// starts its optimizer fresh and saves the state with its first
// checkpoint, and a fine-tune from the run makes its own.
func TestImportedRunOptimizerState(t *testing.T) {
	dir := t.TempDir()
	run := filepath.Join(dir, "llama")
	mustRun(t, "import", hfFolder(t, "--family", "llama", "--vocab", "300"), "--out", run, "--tokenizer", "byte", "--context", "32")
	step0 := filepath.Join(run, "checkpoints", "step-00000000")
	if _, err := os.Stat(filepath.Join(step0, checkpoint.OptimizerFile)); err == nil {
		t.Fatalf("import wrote %s", checkpoint.OptimizerFile)
	}
	trainFile, validFile := writeRecords(t, dir, "train.jsonl", 20), writeRecords(t, dir, "valid.jsonl", 4)
	lora := filepath.Join(dir, "lora")
	mustRun(t, "finetune", "--from", run, "--data", trainFile, "--valid", validFile, "--out", lora,
		"--steps", "2", "--eval-every", "0", "--no-progress")
	ck, err := checkpoint.Latest(lora)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(ck, checkpoint.OptimizerFile)); err != nil {
		t.Errorf("the fine-tune's checkpoint has no optimizer state: %v", err)
	}
	mustRun(t, "train", "--resume", run, "--steps", "2", "--batch", "2", "--eval-every", "0")
	if _, err := os.Stat(filepath.Join(run, "checkpoints", "step-00000002", checkpoint.OptimizerFile)); err != nil {
		t.Errorf("train --resume of the import saved no optimizer state at step 2: %v", err)
	}
}
