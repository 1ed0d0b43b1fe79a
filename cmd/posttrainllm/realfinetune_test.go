package main

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/data/chattemplate"
	"github.com/posttrainllm/posttrainllm/generate"
	"github.com/posttrainllm/posttrainllm/internal/realmodel"
	"github.com/posttrainllm/posttrainllm/mlx"
)

// shakespeareChats writes n multi-turn chat records to dir/name, made from
// the spoken lines of the text at path from its line'th on: the user says
// a line, the assistant answers with the next; every third record has
// three turns, the others two. It returns the file and the first line the
// user says.
func shakespeareChats(t *testing.T, path, dir, name string, line, n int) (string, string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(string(b), "\n")[line:] {
		if l = strings.TrimSpace(l); l != "" && !strings.HasSuffix(l, ":") { // not a speaker's name
			lines = append(lines, l)
		}
	}
	first := lines[0]
	var out strings.Builder
	for r := 0; r < n; r++ {
		var msgs []data.Message
		for turn := 0; turn < 2+btoi(r%3 == 2); turn++ {
			if len(lines) < 2 {
				t.Fatalf("%s: too few lines from line %d for %d records", path, line, n)
			}
			msgs = append(msgs, data.Message{Role: "user", Content: lines[0]}, data.Message{Role: "assistant", Content: lines[1]})
			lines = lines[2:]
		}
		rec, err := json.Marshal(map[string][]data.Message{"messages": msgs})
		if err != nil {
			t.Fatal(err)
		}
		out.Write(append(rec, '\n'))
	}
	file := filepath.Join(dir, name)
	if err := os.WriteFile(file, []byte(out.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return file, first
}

// btoi is 1 for true.
func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// realLogits returns the ids of text (special tokens written in it as
// their ids) and the model's float32 logits [T·V] on them, for the model
// at path (a run folder or checkpoint, through the generator sample uses).
func realLogits(t *testing.T, path, text string) ([]int32, []float32) {
	t.Helper()
	m, err := generationSource{from: path}.open("cpu")
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ids := m.EncodePrompt(text)
	var out []float32
	err = mlx.Do(func() error {
		s := mlx.NewScope()
		defer s.Close()
		var err error
		out, err = mlx.AsType(m.Net.Logits(m.Params, mlx.FromSlice(ids, 1, len(ids))), mlx.Float32).Float32s()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return ids, out
}

// The acceptance on the real SmolLM2-135M-Instruct: a LoRA
// fine-tune on multi-turn chats made from Shakespeare (rendered with the
// model's own template, at a short context) lowers the held-out loss;
// sample --adapter --chat answers in the template's format, its reply
// ending where the model writes <|im_end|> and holding no role headers;
// fuse, then export, gives a Hugging Face folder that import reads back
// with the fused run's logits, bit for bit, and that carries the
// model's chat template on.
func TestRealModelChatFineTuneFuseExport(t *testing.T) {
	dir := t.TempDir()
	text := realmodel.Shakespeare(t)
	trainFile, _ := shakespeareChats(t, text, dir, "train.jsonl", 0, 24)
	validFile, question := shakespeareChats(t, text, dir, "valid.jsonl", 20000, 6)
	base := filepath.Join(dir, "smollm")
	mustRun(t, "import", realmodel.Folder(t), "--out", base)

	ft := filepath.Join(dir, "lora")
	mustRun(t, "finetune", "--from", base, "--data", trainFile, "--valid", validFile, "--out", ft, "--context", "128",
		"--steps", "6", "--batch", "2", "--lr", "1e-3", "--warmup", "1", "--eval-every", "6", "--eval-tokens", "512",
		"--device", "cpu", "--no-progress")
	var vals []float64
	for _, m := range readMetrics(t, ft) {
		if m.ValLoss != nil {
			vals = append(vals, *m.ValLoss)
		}
	}
	if len(vals) != 2 || !(vals[1] < vals[0]) {
		t.Fatalf("held-out losses %v; want two (steps 0 and 6), falling", vals)
	}
	t.Logf("held-out loss %.4f at step 0, %.4f after 6 LoRA updates", vals[0], vals[1])

	greedy := []string{"--temperature", "0", "--tokens", "48", "--device", "cpu"}
	reply := strings.TrimSuffix(mustRun(t, append([]string{"sample", "--adapter", ft, "--chat", question}, greedy...)...).stdout, "\n")
	if strings.TrimSpace(reply) == "" || strings.Contains(reply, "<|im_") || strings.Contains(reply, "assistant\n") || strings.Contains(reply, "user\n") {
		t.Fatalf("sample --adapter --chat answered %q; want a reply without role headers or special tokens", reply)
	}
	// In the program, the same greedy reply ends where the model writes
	// <|im_end|>, not at the token budget.
	m, err := generationSource{adapter: ft}.open("cpu")
	if err != nil {
		t.Fatal(err)
	}
	res, err := m.Generate(context.Background(), generate.Request{Messages: []data.Message{{Role: "user", Content: question}}, Options: generate.Options{Sampling: generate.Sampling{MaxTokens: 48}}}, nil)
	imEnd := m.EncodePrompt("<|im_end|>")
	m.Close()
	if err != nil {
		t.Fatal(err)
	}
	if res.Text != reply || res.FinishReason != generate.FinishStop || len(imEnd) != 1 || res.StopToken != imEnd[0] {
		t.Fatalf("the fine-tune's reply %q ended with %q at token %d; want %q ended by <|im_end|> (%v)", res.Text, res.FinishReason, res.StopToken, reply, imEnd)
	}
	t.Logf("the fine-tune answers %q with %q", question, reply)

	fused := filepath.Join(dir, "fused")
	mustRun(t, "fuse", "--adapter", ft, "--out", fused)
	exported := filepath.Join(dir, "exported")
	mustRun(t, "export", fused, exported)
	again := filepath.Join(dir, "again")
	mustRun(t, "import", exported, "--out", again)
	chat := "<|im_start|>user\n" + question + "<|im_end|>\n<|im_start|>assistant\n" + reply + "<|im_end|>\n"
	ids, want := realLogits(t, fused, chat)
	againIDs, got := realLogits(t, again, chat)
	if !slices.Equal(ids, againIDs) {
		t.Fatalf("the reimported export encodes the chat as %v, the fused run as %v", againIDs, ids)
	}
	if len(got) != len(want) || len(want) != len(ids)*49152 {
		t.Fatalf("%d logits from the reimported export, %d from the fused run, for %d tokens", len(got), len(want), len(ids))
	}
	for i := range want {
		if got[i] != want[i] || math.IsNaN(float64(want[i])) {
			t.Fatalf("logit %d: the reimported export gives %g, the fused run %g", i, got[i], want[i])
		}
	}
	// The export carries the model's chat template on, for chatting with it.
	tpl, err := chattemplate.Load(realmodel.Folder(t))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := chattemplate.Load(exported); err != nil || got.Source != tpl.Source {
		t.Fatalf("the exported folder's chat template (%v) is not the model's", err)
	}
}
