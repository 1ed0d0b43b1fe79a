package hftokenizer

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/internal/pyenv"
)

// hfSamples cover unicode (accents, CJK, emoji, a byte-order mark, a
// combining mark), runs of spaces, tabs and newlines, and leading and
// trailing whitespace.
var hfSamples = []string{
	"ROMEO: But soft, what light through yonder window breaks?",
	"Hello,  world!\n\n\tTabs and   spaces — naïve café 日本語 🙂 end",
	"   leading spaces and trailing ones   ",
	"\n\n\n\t\t  \r\n mixed\u00a0whitespace\u2003here",
	"Ünïcödé: Ελληνικά, русский, עברית, العربية, हिन्दी, 한국어, e\u0301, \ufeffBOM",
	"code: for i := 0; i < n; i++ { x[i] = y[i] * 2 } // comment",
	"numbers 1234567890 and 3.14159, 2,718; 1e-5",
	"",
}

// hfSpecialText holds special-token strings, which Encode treats as text
// (tokenizers matches them as special tokens).
const hfSpecialText = "</s> and <|endoftext|> are only text here <s>"

// python is the interpreter of the project-local environment that holds
// the pinned tokenizers (make py-deps).
func python(t *testing.T) string {
	t.Helper()
	return pyenv.Reference(t)
}

// hfTokenizerFiles trains the two tokenizers with Hugging Face's tokenizers
// (make py-deps installs it) on the shared text and returns the folder
// with their files and the expected encodings.
func hfTokenizerFiles(t *testing.T) string {
	t.Helper()
	py := python(t)
	text := shakespeare(t)
	dir := t.TempDir()
	textPath, samplesPath := filepath.Join(dir, "text.txt"), filepath.Join(dir, "samples.json")
	samples, _ := json.Marshal(hfSamples)
	if err := os.WriteFile(textPath, []byte(text[:min(len(text), 100_000)]), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(samplesPath, samples, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, filepath.Join("testdata", "hftokenizers.py"), textPath, dir, samplesPath)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hftokenizers.py: %v\n%s", err, out)
	}
	return dir
}

// A byte-level BPE and a SentencePiece-style BPE with byte fallback, both
// trained by Hugging Face's tokenizers, give the ids tokenizers gives on
// every sample, decode to the text it decodes, and take EOS from the
// files; special-token strings in text never become the EOS id.
// Trained on the shared text, the vocabularies lack most of the samples'
// characters: the SentencePiece-style one falls back to bytes for them.
func TestMatchesTokenizers(t *testing.T) {
	dir := hfTokenizerFiles(t)
	b, err := os.ReadFile(filepath.Join(dir, "expected.json"))
	if err != nil {
		t.Fatal(err)
	}
	var expected map[string]struct {
		IDs     [][]int32 `json:"ids"`
		Decoded []string  `json:"decoded"`
		EOS     int32     `json:"eos"`
		Vocab   int       `json:"vocab"`
	}
	if err := json.Unmarshal(b, &expected); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"bytelevel", "sp"} {
		want := expected[name]
		tok, err := Load(filepath.Join(dir, name, "tokenizer.json"))
		if err != nil {
			t.Fatal(err)
		}
		if tok.EOT() != want.EOS || tok.VocabSize() != want.Vocab {
			t.Errorf("%s: EOS %d, vocabulary %d; tokenizers says %d and %d", name, tok.EOT(), tok.VocabSize(), want.EOS, want.Vocab)
		}
		for i, s := range hfSamples {
			ids := tok.Encode(s)
			if !slices.Equal(ids, want.IDs[i]) && !(len(ids) == 0 && len(want.IDs[i]) == 0) {
				t.Errorf("%s: %q:\n got  %v\n want %v", name, s, ids, want.IDs[i])
				continue
			}
			if got := tok.Decode(ids); got != want.Decoded[i] {
				t.Errorf("%s: decoding %q gives %q, tokenizers gives %q", name, s, got, want.Decoded[i])
			}
		}
		if ids := tok.Encode(hfSpecialText); len(ids) == 0 || slices.Contains(ids, tok.EOT()) {
			t.Errorf("%s: %q encodes to %v; want text tokens, never the EOS id %d", name, hfSpecialText, ids, tok.EOT())
		}
		if got := tok.Decode([]int32{-1, int32(tok.VocabSize())}); got != "\ufffd\ufffd" {
			t.Errorf("%s: ids outside the vocabulary decode to %q, want two U+FFFD", name, got)
		}
		again, err := Load(filepath.Join(dir, name, "tokenizer.json"))
		if err != nil {
			t.Fatal(err)
		}
		if again.Name() != tok.Name() || tok.Name() == "" {
			t.Errorf("%s: names %q and %q for the same file", name, tok.Name(), again.Name())
		}
		if name == "sp" {
			// The same tokenizer.json with another eos_token separates
			// documents with another id, so it must not share token caches.
			other := t.TempDir()
			raw, err := os.ReadFile(filepath.Join(dir, name, "tokenizer.json"))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(other, "tokenizer.json"), raw, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(other, "tokenizer_config.json"), []byte(`{"eos_token": "<s>"}`), 0o644); err != nil {
				t.Fatal(err)
			}
			bos, err := Load(filepath.Join(other, "tokenizer.json"))
			if err != nil {
				t.Fatal(err)
			}
			if bos.EOT() == tok.EOT() || bos.Name() == tok.Name() {
				t.Errorf("%s: eos_token <s> gives EOS %d and name %q; </s> gives %d and %q: want both to differ",
					name, bos.EOT(), bos.Name(), tok.EOT(), tok.Name())
			}
		}
	}
}

var _ data.Tokenizer = (*Tokenizer)(nil)
