package hf

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/data/hftokenizer"
	"github.com/posttrainllm/posttrainllm/internal/pyenv"
	"github.com/posttrainllm/posttrainllm/internal/realmodel"
	"github.com/posttrainllm/posttrainllm/mlx"
)

// TestGemmaSentencePieceMatchesTokenizers makes the tokenizer files of
// Gemma-3-270M's GGUF (a SentencePiece vocabulary of 262,144 tokens with
// scores, byte fallback, control and user-defined tokens) and checks the
// tokenizer hftokenizer reads from them against a BPE that
// spm_reference.py builds from the file with the `tokenizers` library's
// API: the same ids on the whole of tinyshakespeare and on stress texts
// (special tokens written in text matched), the same decoded text; the
// library itself gives those ids with the generated tokenizer.json.
func TestGemmaSentencePieceMatchesTokenizers(t *testing.T) {
	path := realmodel.GemmaGGUF(t)
	h, err := mlx.ReadGGUFHeader(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := mlx.LoadGGUF(path)
	if err != nil {
		t.Fatal(err)
	}
	meta := f.Metadata
	f.Free()
	files, err := ggufTokenizerFiles(meta, 262144)
	if err != nil {
		t.Fatal(err)
	}
	if h.Strings["tokenizer.ggml.model"] != "llama" {
		t.Fatalf("tokenizer.ggml.model %q, want llama", h.Strings["tokenizer.ggml.model"])
	}
	dir := t.TempDir()
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got := filepath.Join(dir, "tokenizer.json")
	out := filepath.Join(dir, "want.json")
	pyenv.Run(t, pyenv.Reference(t), filepath.Join("testdata", "spm_reference.py"), path, got, realmodel.Shakespeare(t), out)
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var want struct {
		Texts, Decoded []string
		IDs            [][]int32
	}
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	tok, err := hftokenizer.Load(got)
	if err != nil {
		t.Fatal(err)
	}
	if tok.VocabSize() != 262144 || tok.EOT() != 1 {
		t.Errorf("vocabulary %d, EOT %d; want 262,144 and <eos> = 1", tok.VocabSize(), tok.EOT())
	}
	// add_bos_token: a prompt starts with <bos> (2), once.
	if p := tok.PromptPrefix(); !slices.Equal(p, []int32{2}) {
		t.Errorf("prompt prefix %v, want [2] (<bos>)", p)
	}
	hi := tok.EncodeSpecial("Hello")
	if got := data.EncodePrompt(tok, "Hello"); !slices.Equal(got, append([]int32{2}, hi...)) {
		t.Errorf("EncodePrompt(Hello) = %v, want <bos> and %v", got, hi)
	}
	if got := data.EncodePrompt(tok, "<bos>Hello"); !slices.Equal(got, append([]int32{2}, hi...)) {
		t.Errorf("EncodePrompt(<bos>Hello) = %v, want one <bos> and %v", got, hi)
	}
	n := 0
	for i, text := range want.Texts {
		ids := tok.EncodeSpecial(text)
		if !slices.Equal(ids, want.IDs[i]) {
			k := 0
			for k < min(len(ids), len(want.IDs[i])) && ids[k] == want.IDs[i][k] {
				k++
			}
			t.Errorf("ids of %.40q differ at %d of %d: %v, tokenizers gives %v", text, k, len(want.IDs[i]),
				ids[k:min(k+5, len(ids))], want.IDs[i][k:min(k+5, len(want.IDs[i]))])
			continue
		}
		if d := tok.Decode(ids); d != want.Decoded[i] {
			t.Errorf("decoding of %.40q: %.60q, tokenizers gives %.60q", text, d, want.Decoded[i])
		}
		n += len(ids)
	}
	if len(want.IDs[0]) < 300000 {
		t.Errorf("tinyshakespeare is %d ids, want the whole text's", len(want.IDs[0]))
	}
	t.Logf("%d ids compared (tinyshakespeare: %d)", n, len(want.IDs[0]))
}
