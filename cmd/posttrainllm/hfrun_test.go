package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/checkpoint"
	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/data/hftokenizer"
	"github.com/posttrainllm/posttrainllm/finetune"
	"github.com/posttrainllm/posttrainllm/train"
)

// spTokenizer trains the SentencePiece-style tokenizer.json (byte fallback,
// as Llama 2 and Mistral) of data/hftokenizer's tests on text and returns
// the folder holding it and its tokenizer_config.json.
func spTokenizer(t *testing.T, text string) string {
	t.Helper()
	py := filepath.Join("..", "..", ".deps", "py", "bin", "python")
	dir := t.TempDir()
	samples := filepath.Join(dir, "samples.json")
	if err := os.WriteFile(samples, []byte(`["x"]`), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, filepath.Join("..", "..", "data", "hftokenizer", "testdata", "hftokenizers.py"), text, dir, samples)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hftokenizers.py: %v\n%s", err, out)
	}
	return filepath.Join(dir, "sp")
}

// copyFiles copies the named files of folder src into folder dst.
func copyFiles(t *testing.T, src, dst string, names ...string) {
	t.Helper()
	for _, f := range names {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// An imported Llama folder with its own tokenizer.json trains, fine-tunes,
// samples, evaluates and exports with that tokenizer's ids: the corpus
// tokens train --resume caches are the tokenizer.json's, the fine-tune's
// rows are, a greedy sample of the run is the Hugging Face folder's own,
// and a run without its hf-tokenizer folder says which file is missing.
func TestImportedRunUsesTokenizerJSON(t *testing.T) {
	tmp := t.TempDir()
	src, err := os.ReadFile(shakespeare)
	if err != nil {
		t.Fatalf("the shared text is missing: %v", err)
	}
	text := filepath.Join(tmp, "text.txt")
	if err := os.WriteFile(text, src[:50_000], 0o644); err != nil {
		t.Fatal(err)
	}
	spDir := spTokenizer(t, text)
	folder := hfFolder(t, "--family", "llama", "--vocab", "900")
	copyFiles(t, spDir, folder, "tokenizer.json", "tokenizer_config.json")
	tok, err := hftokenizer.Load(filepath.Join(folder, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}

	// import records the tokenizer.json as the run's tokenizer.
	run := filepath.Join(tmp, "run")
	mustRun(t, "import", folder, "--out", run, "--context", "32")
	st, err := train.ReadRunState(filepath.Join(run, "checkpoints", "step-00000000", checkpoint.StateFile))
	if err != nil {
		t.Fatal(err)
	}
	if st.Config.Tokenizer != train.HFTokenizer {
		t.Fatalf("the imported run's tokenizer is %q, want %q", st.Config.Tokenizer, train.HFTokenizer)
	}

	// sample --from the run continues as sample --from the folder: the
	// same weights and the same tokenizer.json.
	prompt := "ROMEO: naïve"
	fromRun := mustRun(t, "sample", "--from", run, "--prompt", prompt, "--tokens", "8", "--temperature", "0")
	fromFolder := mustRun(t, "sample", "--from", folder, "--prompt", prompt, "--tokens", "8", "--temperature", "0")
	if !strings.HasPrefix(fromRun.stdout, prompt) || fromRun.stdout != fromFolder.stdout {
		t.Fatalf("greedy sample of the run %q, of the folder %q; want the same continuation of the prompt", fromRun.stdout, fromFolder.stdout)
	}

	// train --resume tokenises the corpus with the tokenizer.json.
	corpusFile := filepath.Join(tmp, "corpus.txt")
	if err := os.WriteFile(corpusFile, src[50_000:70_000], 0o644); err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(tmp, "tokens")
	mustRun(t, "train", "--resume", run, "--steps", "2", "--batch", "2", "--eval-every", "0",
		"--corpus", corpusFile, "--token-cache", cache)
	files, err := filepath.Glob(filepath.Join(cache, "*.tok"))
	if err != nil || len(files) != 1 {
		t.Fatalf("token cache holds %v (%v), want one file", files, err)
	}
	if base := filepath.Base(files[0]); !strings.HasPrefix(base, tok.Name()+"-") {
		t.Fatalf("token cache file %s, want one named for the tokenizer.json (%s)", base, tok.Name())
	}
	cached, err := data.ReadTokenFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	defer cached.Close()
	want := tok.Encode(string(src[50_000:70_000]))
	got := make([]int32, 64)
	cached.All().CopyInto(got, 0)
	if !slices.Equal(got, want[:64]) {
		t.Fatalf("train --resume trained on ids %v, the tokenizer.json's are %v", got, want[:64])
	}
	if slices.Equal(got, mustByteEncode(t, string(src[50_000:50_064]))) {
		t.Fatal("the corpus was tokenised bytewise")
	}

	// finetune --from renders its records with the tokenizer.json.
	records := writeRecords(t, tmp, "train.jsonl", 12)
	ft := finetune.Config{Base: run, Method: finetune.MethodFull, Train: records, MaskPrompt: true, Tokenizers: openTokenizer}
	f, err := finetune.New(st.Config, ft, filepath.Join(tmp, "unused"))
	if err != nil {
		t.Fatal(err)
	}
	rows, err := finetune.LoadRows(records, tok, st.Config.Model.Context, true, false)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(f.Train.X, rows.X) || !slices.Equal(f.Train.Y, rows.Y) {
		t.Fatalf("the fine-tune's rows start %v, the tokenizer.json's %v", f.Train.X[:16], rows.X[:16])
	}
	ftRun := filepath.Join(tmp, "ft")
	mustRun(t, "finetune", "--from", run, "--data", records, "--method", "lora", "--out", ftRun, "--steps", "2", "--batch", "2", "--no-progress")
	a := mustRun(t, "sample", "--adapter", ftRun, "--prompt", prompt, "--tokens", "4", "--temperature", "0")
	if !strings.HasPrefix(a.stdout, prompt) {
		t.Fatalf("sample of the fine-tune %q, want a continuation of %q", a.stdout, prompt)
	}
	fused := filepath.Join(tmp, "fused")
	mustRun(t, "fuse", "--adapter", ftRun, "--out", fused)
	mustRun(t, "eval", "--from", fused, "--corpus", corpusFile, "--token-cache", cache)
	exported := filepath.Join(tmp, "exported")
	mustRun(t, "export", fused, exported)
	if b, err := os.ReadFile(filepath.Join(exported, "tokenizer.json")); err != nil || string(b) != string(mustRead(t, filepath.Join(folder, "tokenizer.json"))) {
		t.Fatalf("the fused run's export has tokenizer.json %d bytes (%v), want the imported folder's", len(b), err)
	}

	// Without its hf-tokenizer folder the run names the missing file.
	if err := os.RemoveAll(filepath.Join(run, train.TokenizerDir)); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"sample", "--from", run, "--prompt", "x"},
		{"eval", "--from", run, "--corpus", corpusFile},
		{"train", "--resume", run, "--steps", "3", "--corpus", corpusFile},
	} {
		r := runCLI(t, args...)
		if r.code == 0 {
			t.Fatalf("%s without %s succeeded", strings.Join(args, " "), train.TokenizerDir)
		}
		checkErrorLine(t, args[0]+" without the tokenizer", r.stderr, train.HFTokenizerPath(run))
	}
}

func mustByteEncode(t *testing.T, s string) []int32 {
	t.Helper()
	b, err := data.NewTokenizer("byte")
	if err != nil {
		t.Fatal(err)
	}
	return b.Encode(s)
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
