package hftokenizer

import (
	_ "embed"
	"encoding/binary"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"golang.org/x/text/unicode/norm"

	"github.com/posttrainllm/posttrainllm/internal/realmodel"
)

// stressSamples are texts built to find where a tokenizer's pipeline
// differs from tokenizers': whitespace runs before words, tabs, "\r\n",
// trailing and lone whitespace, Unicode spaces, digit runs, contractions
// in both cases, code (a whole Go file among them), CJK, emoji, text that
// NFC changes, the metaspace character itself, and special and added
// tokens inside text, adjacent, cut short and surrounded by spaces.
var stressSamples = append(slices.Clone(hfSamples),
	"\n\nFirst Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n",
	"{\n\tx := 1\n\t\ty\n}\n",
	"line one\r\nline two\r\n\r\n\r\nthree",
	"trailing spaces   ",
	"   ", "\t", "\n", " ", "a", "a \n b", "  \n\n  word", "word  \t  word\t\t\n",
	"12345678901234567890 3.14159 1,000,000 v1.2.3 ٣٤٥ ½ ² 10x20",
	"def f(x):\n    return x**2  # square\n\nif __name__ == '__main__':\n\tprint(f(3))\n",
	"日本語のテキスト、中文文本。한국어 텍스트",
	"🙂👍🏽 👨\u200d👩\u200d👧 🇫🇷!!",
	"I'm you're he'll she'd it's we've THEY'RE DON'T I'M 'S 'ſ x'",
	"a\u00a0b\u2003c\u3000d\u0085e\u200bf\u2028g",
	"e\u0301 é ﬁ ① Ａ Å",
	"\u2581 already has meta \u2581\u2581x",
	"<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
	"<|im_end|><|im_start|><|endoftext|> <|endoftext|>x<|im_sta <|im_start|>xy",
	"<s>[INST] hi [/INST] ok</s><unk> </s>",
	"<|begin_of_text|><|eot_id|>a <mask> b  <mask>\n[NS]x [NS] wordtok swordtok wordtok.",
	// Runs of twenty thousand characters, as padding in files has.
	strings.Repeat(" ", 20_000)+"x"+strings.Repeat("=", 20_000)+"\n\n"+strings.Repeat("\t\n", 5_000)+"y",
	// Real code, with Unix and Windows line ends.
	goSource, strings.ReplaceAll(goSource, "\n", "\r\n"),
)

// goSource is a Go file of this package: real code, tabs and comments.
//
//go:embed pattern.go
var goSource string

// stressExpected is what testdata/stress.py records for one variant.
type stressExpected struct {
	Special        [][]int32 `json:"special"`
	Plain          [][]int32 `json:"plain"`
	SpecialDecoded []string  `json:"special_decoded"`
	PlainDecoded   []string  `json:"plain_decoded"`
	SinglesDecoded []string  `json:"singles_decoded"`
	Seqs           [][]int32 `json:"seqs"`
	SeqsDecoded    []string  `json:"seqs_decoded"`
}

// smolLM2TokenizerJSON is the real SmolLM2-135M-Instruct tokenizer.json
// that `make real-model` converts from the published GGUF.
func smolLM2TokenizerJSON(t testing.TB) string {
	t.Helper()
	return filepath.Join(realmodel.Folder(t), "tokenizer.json")
}

// shakespeare reads the shared training text.
func shakespeare(t testing.TB) string {
	t.Helper()
	text, err := os.ReadFile(realmodel.Shakespeare(t))
	if err != nil {
		t.Fatal(err)
	}
	return string(text)
}

// stressVariants runs testdata/stress.py and returns its folder.
func stressVariants(t *testing.T) string {
	t.Helper()
	py := python(t)
	dir := t.TempDir()
	textPath, samplesPath := filepath.Join(dir, "text.txt"), filepath.Join(dir, "samples.json")
	samples, _ := json.Marshal(stressSamples)
	if err := os.WriteFile(textPath, []byte(shakespeare(t)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(samplesPath, samples, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, filepath.Join("testdata", "stress.py"), smolLM2TokenizerJSON(t), textPath, samplesPath, dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("stress.py: %v\n%s", err, out)
	}
	return dir
}

// idsEqual compares id lists, nil and empty alike.
func idsEqual(a, b []int32) bool { return len(a) == 0 && len(b) == 0 || slices.Equal(a, b) }

// The real SmolLM2 tokenizer.json and five variants in the shapes of
// Llama 3, Qwen2, Llama 2, Mistral and a SentencePiece Unigram model
// (with byte fallback) give the ids tokenizers gives on
// every stress sample, both with special tokens matched (EncodeSpecial)
// and as text (Encode), and decode them to the text tokenizers decodes
// them to, as they decode every id alone and random id sequences that cut
// characters apart. Byte-level ids decode back to the sample (NFC-normalized for
// Qwen2), and so do Llama 2's for samples without leading white space.
// On the whole of tinyshakespeare, SmolLM2's ids are tokenizers' too.
func TestStressMatchesTokenizers(t *testing.T) {
	dir := stressVariants(t)
	t.Run("smollm2-shakespeare", func(t *testing.T) { shakespeareMatches(t, dir) })
	for _, name := range []string{"smollm2", "llama3", "qwen2", "llama2", "metaspace", "unigram"} {
		t.Run(name, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join(dir, name, "expected.json"))
			if err != nil {
				t.Fatal(err)
			}
			var want stressExpected
			if err := json.Unmarshal(b, &want); err != nil {
				t.Fatal(err)
			}
			tok, err := Load(filepath.Join(dir, name, "tokenizer.json"))
			if err != nil {
				t.Fatal(err)
			}
			for i, s := range stressSamples {
				special, plain := tok.EncodeSpecial(s), tok.Encode(s)
				if !idsEqual(special, want.Special[i]) {
					t.Errorf("EncodeSpecial(%q):\n got        %v\n tokenizers %v", s, special, want.Special[i])
				}
				if !idsEqual(plain, want.Plain[i]) {
					t.Errorf("Encode(%q):\n got        %v\n tokenizers %v", s, plain, want.Plain[i])
				}
				if got := tok.Decode(want.Special[i]); got != want.SpecialDecoded[i] {
					t.Errorf("Decode(EncodeSpecial(%q)) = %q, tokenizers %q", s, got, want.SpecialDecoded[i])
				}
				if got := tok.Decode(want.Plain[i]); got != want.PlainDecoded[i] {
					t.Errorf("Decode(Encode(%q)) = %q, tokenizers %q", s, got, want.PlainDecoded[i])
				}
				back := tok.Decode(plain)
				switch name {
				case "smollm2", "llama3":
					if back != s {
						t.Errorf("Decode(Encode(%q)) = %q", s, back)
					}
				case "qwen2":
					if back != norm.NFC.String(s) {
						t.Errorf("Decode(Encode(%q)) = %q, want its NFC form", s, back)
					}
				case "llama2":
					// tokenizers decodes a "\u2581" of the text as a space.
					if !strings.HasPrefix(s, " ") && !strings.Contains(s, "\u2581") && back != s {
						t.Errorf("Decode(Encode(%q)) = %q", s, back)
					}
				}
			}
			if len(want.SinglesDecoded) != tok.VocabSize() {
				t.Fatalf("vocabulary %d, tokenizers %d", tok.VocabSize(), len(want.SinglesDecoded))
			}
			for id, w := range want.SinglesDecoded {
				if got := tok.Decode([]int32{int32(id)}); got != w {
					t.Errorf("Decode([%d]) = %q, tokenizers %q", id, got, w)
				}
			}
			for i, ids := range want.Seqs {
				if got := tok.Decode(ids); got != want.SeqsDecoded[i] {
					t.Errorf("Decode(%v) = %q, tokenizers %q", ids, got, want.SeqsDecoded[i])
				}
			}
			if name == "smollm2" {
				for content, id := range tok.SpecialTokens() {
					if got := tok.EncodeSpecial(content); !slices.Equal(got, []int32{id}) {
						t.Errorf("EncodeSpecial(%q) = %v, want [%d]", content, got, id)
					}
					if slices.Contains(tok.Encode(content), id) {
						t.Errorf("Encode(%q) contains the special id %d", content, id)
					}
				}
				if len(tok.SpecialTokens()) != 17 {
					t.Errorf("%d special tokens, SmolLM2 has 17", len(tok.SpecialTokens()))
				}
			}
		})
	}
}

// shakespeareMatches checks that the real SmolLM2 tokenizer gives
// tokenizers' ids on the whole of tinyshakespeare, recorded in dir.
func shakespeareMatches(t *testing.T, dir string) {
	raw, err := os.ReadFile(filepath.Join(dir, "smollm2", "text.ids"))
	if err != nil {
		t.Fatal(err)
	}
	want := make([]int32, len(raw)/4)
	for i := range want {
		want[i] = int32(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	tok, err := Load(smolLM2TokenizerJSON(t))
	if err != nil {
		t.Fatal(err)
	}
	text := shakespeare(t)
	got := tok.Encode(text)
	if len(got) != len(want) {
		t.Errorf("%d ids, tokenizers gives %d", len(got), len(want))
	}
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			t.Fatalf("id %d: %d (%q), tokenizers %d (%q); context %q", i, got[i], tok.Decode(got[i:i+1]),
				want[i], tok.Decode(want[i:i+1]), tok.Decode(want[max(0, i-8):min(len(want), i+8)]))
		}
	}
	if back := tok.Decode(got); back != text {
		t.Errorf("the text does not decode back to itself")
	}
}

// Encoding from several goroutines at once gives the ids one goroutine
// gives: the word cache is shared safely.
func TestConcurrentEncode(t *testing.T) {
	path := smolLM2TokenizerJSON(t)
	serial, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	want := make([][]int32, len(stressSamples))
	for i, s := range stressSamples {
		want[i] = serial.EncodeSpecial(s)
	}
	tok, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for k := range stressSamples {
				i := (k + g*7) % len(stressSamples)
				if got := tok.EncodeSpecial(stressSamples[i]); !idsEqual(got, want[i]) {
					t.Errorf("goroutine %d, sample %d: %v, alone %v", g, i, got, want[i])
				}
			}
		})
	}
	wg.Wait()
}
