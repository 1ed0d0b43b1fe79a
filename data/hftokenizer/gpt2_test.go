package hftokenizer

import (
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tiktoken-go/tokenizer/codec"

	"github.com/posttrainllm/posttrainllm/data"
)

// GPT-2's tokenizer.json, built by Hugging Face's tokenizers from the merge
// ranks posttrainllm embeds, reads into a tokenizer whose ids equal both
// tokenizers' and posttrainllm's own GPT-2 tokenizer's on every sample.
func TestGPT2TokenizerJSON(t *testing.T) {
	py := python(t)
	dir := t.TempDir()
	r50k := codec.NewR50kBase()
	var ranks strings.Builder
	for id := range uint(50256) {
		piece, err := r50k.Decode([]uint{id})
		if err != nil {
			t.Fatal(err)
		}
		ranks.WriteString(hex.EncodeToString([]byte(piece)) + "\n")
	}
	ranksPath, samplesPath := filepath.Join(dir, "ranks.hex"), filepath.Join(dir, "samples.json")
	samples, _ := json.Marshal(hfSamples)
	if err := os.WriteFile(ranksPath, []byte(ranks.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(samplesPath, samples, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, filepath.Join("testdata", "gpt2json.py"), ranksPath, dir, samplesPath)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("gpt2json.py: %v\n%s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(dir, "expected.json"))
	if err != nil {
		t.Fatal(err)
	}
	var want struct {
		IDs [][]int32 `json:"ids"`
		EOS int32     `json:"eos"`
	}
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	tok, err := Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	gpt2, err := data.NewTokenizer("gpt2")
	if err != nil {
		t.Fatal(err)
	}
	if tok.EOT() != want.EOS || tok.EOT() != gpt2.EOT() || tok.VocabSize() != gpt2.VocabSize() {
		t.Fatalf("EOS %d, vocabulary %d; tokenizers' EOS %d, posttrainllm's GPT-2 %d and %d",
			tok.EOT(), tok.VocabSize(), want.EOS, gpt2.EOT(), gpt2.VocabSize())
	}
	for i, s := range hfSamples {
		ids := tok.Encode(s)
		if !slices.Equal(ids, want.IDs[i]) && len(ids)+len(want.IDs[i]) > 0 {
			t.Errorf("%q:\n got        %v\n tokenizers %v", s, ids, want.IDs[i])
		}
		if own := gpt2.Encode(s); !slices.Equal(ids, own) && len(ids)+len(own) > 0 {
			t.Errorf("%q:\n got           %v\n posttrainllm %v", s, ids, own)
		}
		if got := tok.Decode(ids); got != s {
			t.Errorf("%q decodes back to %q", s, got)
		}
	}
}
