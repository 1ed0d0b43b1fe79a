package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/internal/pyenv"
)

// hfFolder writes a random-weight Hugging Face folder with the hf
// package's numpy reference (make py-deps installs its Python packages).
func hfFolder(t *testing.T, args ...string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "hf")
	pyenv.Run(t, pyenv.Reference(t), filepath.Join("..", "..", "hf", "testdata", "reference.py"), append([]string{"make", dir}, args...)...)
	return dir
}

// A user's path with downloaded weights: import a GPT-2 folder (GPT-2's
// vocabulary, so the GPT-2 tokenizer), sample from it, export it; import a
// Llama folder with a chosen tokenizer, train it further, export it. The
// exported GPT-2 folder holds the imported tensors under the same names.
func TestImportSampleTrainExport(t *testing.T) {
	tmp := t.TempDir()
	gpt2 := hfFolder(t, "--family", "gpt2", "--vocab", "50257", "--dtype", "bfloat16", "--shards", "2")
	tokenizerJSON := []byte(`{"model":{"type":"BPE"}}`)
	if err := os.WriteFile(filepath.Join(gpt2, "tokenizer.json"), tokenizerJSON, 0o644); err != nil {
		t.Fatal(err)
	}
	run := filepath.Join(tmp, "gpt2")
	r := mustRun(t, "import", gpt2, "--out", run)
	if !strings.Contains(r.stdout, "gpt2") || !strings.Contains(r.stdout, "step-00000000") {
		t.Fatalf("import says %q; want the family and the checkpoint", r.stdout)
	}
	a := mustRun(t, "sample", "--from", run, "--prompt", "Hello", "--tokens", "8", "--temperature", "0")
	b := mustRun(t, "sample", "--from", run, "--prompt", "Hello", "--tokens", "8", "--temperature", "0")
	if !strings.HasPrefix(a.stdout, "Hello") || a.stdout != b.stdout {
		t.Fatalf("greedy samples %q and %q; want the same continuation of the prompt", a.stdout, b.stdout)
	}
	exported := filepath.Join(tmp, "gpt2-export")
	mustRun(t, "export", run, exported)
	for _, f := range []string{"config.json", "model.safetensors"} {
		if _, err := os.Stat(filepath.Join(exported, f)); err != nil {
			t.Fatalf("export wrote no %s: %v", f, err)
		}
	}
	// The tokenizer files of the imported folder come back out with it.
	if b, err := os.ReadFile(filepath.Join(exported, "tokenizer.json")); err != nil || string(b) != string(tokenizerJSON) {
		t.Fatalf("the export's tokenizer.json is %q (%v), the imported folder's %q", b, err, tokenizerJSON)
	}
	// Exporting again onto the folder loses nothing: one error line.
	r = runCLI(t, "export", run, exported)
	if r.code == 0 {
		t.Fatal("export over a non-empty folder succeeded")
	}
	checkErrorLine(t, "export onto a full folder", r.stderr, "not empty")

	llama := hfFolder(t, "--family", "llama", "--vocab", "300")
	lrun := filepath.Join(tmp, "llama")
	mustRun(t, "import", llama, "--out", lrun, "--tokenizer", "byte", "--context", "32")
	mustRun(t, "train", "--resume", lrun, "--steps", "2", "--batch", "2", "--eval-every", "0")
	mustRun(t, "export", lrun, filepath.Join(tmp, "llama-export"))
	ck, err := os.ReadDir(filepath.Join(lrun, "checkpoints"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ck {
		names = append(names, e.Name())
	}
	if !slices.Contains(names, "step-00000002") {
		t.Fatalf("train --resume of the import left checkpoints %v, want step-00000002", names)
	}
}

// Folders that cannot be imported and checkpoints that cannot be exported
// give one error line naming the problem, and write nothing.
func TestImportExportRejectBadInput(t *testing.T) {
	tmp := t.TempDir()
	write := func(name, config string) string {
		dir := filepath.Join(tmp, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(config), 0o644); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	llama := `"model_type":"llama","vocab_size":300,"hidden_size":32,"intermediate_size":64,"num_hidden_layers":1,"num_attention_heads":4,"max_position_embeddings":64`
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no config", []string{"import", tmp}, "config.json"},
		{"quantized", []string{"import", write("q", `{`+llama+`,"quantization_config":{"bits":4}}`)}, "quantization_config"},
		{"model type", []string{"import", write("bert", `{"model_type":"bert"}`)}, `model_type "bert"`},
		{"rope scaling", []string{"import", write("yarn", `{`+llama+`,"rope_scaling":{"rope_type":"yarn","factor":4}}`)}, "rope_scaling"},
		{"no weights", []string{"import", write("empty", `{`+llama+`}`), "--tokenizer", "byte"}, "model.safetensors"},
		{"tokenizer", []string{"import", write("tok", `{`+llama+`}`)}, "--tokenizer"},
	}
	for _, c := range cases {
		out := filepath.Join(tmp, "out-"+strings.ReplaceAll(c.name, " ", "-"))
		r := runCLI(t, append(c.args, "--out", out)...)
		if r.code == 0 {
			t.Errorf("%s: import succeeded", c.name)
			continue
		}
		checkErrorLine(t, c.name, r.stderr, c.want)
		if _, err := os.Stat(out); err == nil {
			t.Errorf("%s: a failed import wrote %s", c.name, out)
		}
	}

	// The default TinyGPT family (the presets') has no Hugging Face counterpart.
	run := filepath.Join(tmp, "tiny")
	mustRun(t, "train", "--preset", "tiny", "--steps", "1", "--out", run, "--eval-every", "0")
	dst := filepath.Join(tmp, "tiny-export")
	r := runCLI(t, "export", run, dst)
	if r.code == 0 {
		t.Fatal("export of a TinyGPT-family model succeeded")
	}
	checkErrorLine(t, "export tinygpt", r.stderr, "neither GPT-2", "Llama")
	if _, err := os.Stat(dst); err == nil {
		t.Errorf("a failed export wrote %s", dst)
	}
}

// sample --from takes a Hugging Face folder and uses its tokenizer.json;
// a tokenizer with more ids than the model is refused with one line.
func TestSampleFromHFFolder(t *testing.T) {
	py := pyenv.Reference(t)
	tokDir := t.TempDir()
	text := filepath.Join(tokDir, "text.txt")
	samples := filepath.Join(tokDir, "samples.json")
	src, err := os.ReadFile(shakespeare)
	if err != nil {
		t.Fatalf("the shared text is missing: %v", err)
	}
	if err := os.WriteFile(text, src[:50_000], 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(samples, []byte(`["x"]`), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, filepath.Join("..", "..", "data", "hftokenizer", "testdata", "hftokenizers.py"), text, tokDir, samples)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hftokenizers.py: %v\n%s", err, out)
	}
	withTokenizer := func(vocab string) string {
		dir := hfFolder(t, "--family", "llama", "--vocab", vocab)
		for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
			b, err := os.ReadFile(filepath.Join(tokDir, "sp", f))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	dir := withTokenizer("900")
	a := mustRun(t, "sample", "--from", dir, "--prompt", "ROMEO: naïve", "--tokens", "8", "--temperature", "0")
	b := mustRun(t, "sample", "--from", dir, "--prompt", "ROMEO: naïve", "--tokens", "8", "--temperature", "0")
	if !strings.HasPrefix(a.stdout, "ROMEO: naïve") || a.stdout != b.stdout {
		t.Fatalf("greedy samples %q and %q; want the same continuation of the prompt", a.stdout, b.stdout)
	}
	r := runCLI(t, "sample", "--from", withTokenizer("300"), "--prompt", "x")
	if r.code == 0 {
		t.Fatal("sampling with a tokenizer larger than the model succeeded")
	}
	checkErrorLine(t, "tokenizer larger than the model", r.stderr, "vocab_size is 300")
}
