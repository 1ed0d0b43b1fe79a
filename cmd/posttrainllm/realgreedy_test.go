package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/generate"
	"github.com/posttrainllm/posttrainllm/internal/realmodel"
)

// referencePy runs hf/testdata/reference.py (the hf package's independent
// numpy reference, with the tokenizers library) with args and returns its
// output lines.
func referencePy(t *testing.T, args ...string) []string {
	t.Helper()
	py, err := filepath.Abs(filepath.Join("..", "..", ".deps", "py", "bin", "python"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(py); err != nil {
		t.Fatalf("the numpy reference needs %s: run `make py-deps`", py)
	}
	out, err := exec.Command(py, append([]string{filepath.Join("..", "..", "hf", "testdata", "reference.py")}, args...)...).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("reference.py %s: %v\n%s", args[0], err, stderr)
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

// parseIDs reads token ids separated by sep.
func parseIDs(t *testing.T, s, sep string) []int32 {
	t.Helper()
	var ids []int32
	for _, f := range strings.Split(strings.TrimSpace(s), sep) {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			t.Fatalf("reference id %q: %v", f, err)
		}
		ids = append(ids, int32(n))
	}
	return ids
}

// The acceptance on the real SmolLM2-135M-Instruct: greedy
// continuations of three prompts, one in the chat format with its special
// tokens written in it, two plain (Shakespeare, and code whose indent is a
// whitespace run), are the ones an independent float64 numpy forward over
// the converted folder picks, token for token. The model is the user's:
// the GGUF file imported as a run, with the tokenizer its metadata
// describes, whose prompt ids equal the tokenizers library's on the
// folder's tokenizer.json. sample --temperature 0 prints the chat prompt
// and the same continuation.
func TestRealModelGreedyMatchesReference(t *testing.T) {
	const n = 12
	prompts := []string{
		"<|im_start|>user\nName three colours.<|im_end|>\n<|im_start|>assistant\n",
		"First Citizen:\nBefore we proceed",
		"def add(a, b):\n    ",
	}
	folder := realmodel.Folder(t)
	run := filepath.Join(t.TempDir(), "smollm")
	mustRun(t, "import", realmodel.GGUF(t), "--out", run)

	encoded := referencePy(t, append([]string{"encode", filepath.Join(folder, "tokenizer.json")}, prompts...)...)
	var args []string
	want := make([][]int32, len(prompts))
	for i := range prompts {
		want[i] = parseIDs(t, encoded[i], ",")
		args = append(args, encoded[i])
	}
	greedy := referencePy(t, append([]string{"greedy", folder, strconv.Itoa(n)}, args...)...)
	if len(encoded) != len(prompts) || len(greedy) != len(prompts) {
		t.Fatalf("reference.py answered %d encodings and %d continuations for %d prompts", len(encoded), len(greedy), len(prompts))
	}

	m, err := generationSource{from: run}.open("cpu")
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for i, p := range prompts {
		ids, gap, _ := strings.Cut(greedy[i], "#")
		ref := parseIDs(t, ids, " ")
		prompt := m.EncodePrompt(p)
		if !slices.Equal(prompt, want[i]) {
			t.Fatalf("prompt %q: posttrainllm's ids %v, the tokenizers library's %v", p, prompt, want[i])
		}
		got, _, err := generate.Tokens(context.Background(), m.Net, m.Params, prompt, generate.Options{Sampling: generate.Sampling{MaxTokens: n}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, ref) {
			t.Errorf("prompt %q: greedy ids %v, the reference's %v\n(%q and %q)", p, got, ref, m.Tokenizer.Decode(got), m.Tokenizer.Decode(ref))
			continue
		}
		if i == 0 { // the command line too, for the prompt with special tokens
			out := mustRun(t, "sample", "--from", run, "--prompt", p, "--temperature", "0", "--tokens", strconv.Itoa(n), "--device", "cpu").stdout
			if text := p + m.Tokenizer.Decode(ref) + "\n"; out != text {
				t.Errorf("sample --temperature 0 printed %q, want the prompt and the reference's continuation %q", out, text)
			}
		}
		t.Logf("%q → %q (%d prompt ids; smallest top-2 logit gap on the way %s)", p, m.Tokenizer.Decode(ref), len(prompt), strings.TrimSpace(gap))
	}
}
