package hftokenizer

import (
	"encoding/hex"
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tiktoken-go/tokenizer/codec"

	"github.com/posttrainllm/posttrainllm/data"
)

// GPT-2's tokenizer.json, built by Hugging Face's tokenizers from the merge
// ranks posttrainllm embeds, reads into a tokenizer whose ids equal both
// tokenizers' and posttrainllm's own GPT-2 tokenizer's on every stress
// sample, with <|endoftext|> as text (Encode) and as the special token
// (EncodeSpecial), and decode back to the sample.
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
	samples, _ := json.Marshal(stressSamples)
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
		IDs     [][]int32 `json:"ids"`
		Special [][]int32 `json:"special"`
		EOS     int32     `json:"eos"`
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
	own := gpt2.(data.SpecialTokenizer)
	if !maps.Equal(tok.SpecialTokens(), own.SpecialTokens()) {
		t.Errorf("special tokens %v, posttrainllm's GPT-2 %v", tok.SpecialTokens(), own.SpecialTokens())
	}
	for i, s := range stressSamples {
		ids := tok.Encode(s)
		if !idsEqual(ids, want.IDs[i]) {
			t.Errorf("%q:\n got        %v\n tokenizers %v", s, ids, want.IDs[i])
		}
		if o := gpt2.Encode(s); !idsEqual(ids, o) {
			t.Errorf("%q:\n got           %v\n posttrainllm %v", s, ids, o)
		}
		special := tok.EncodeSpecial(s)
		if !idsEqual(special, want.Special[i]) {
			t.Errorf("EncodeSpecial(%q):\n got        %v\n tokenizers %v", s, special, want.Special[i])
		}
		if o := own.EncodeSpecial(s); !idsEqual(o, want.Special[i]) {
			t.Errorf("posttrainllm's GPT-2 EncodeSpecial(%q):\n got        %v\n tokenizers %v", s, o, want.Special[i])
		}
		if got := tok.Decode(ids); got != s {
			t.Errorf("%q decodes back to %q", s, got)
		}
	}
}
