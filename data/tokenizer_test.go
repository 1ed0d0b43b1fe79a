package data

import (
	"slices"
	"strings"
	"testing"
)

// roundTripTexts are texts every tokenizer must decode back exactly.
var roundTripTexts = []string{
	"",
	"Hello world",
	"First Citizen:\nBefore we proceed any further, hear me speak.\n\n",
	"func main() {\n\tfmt.Println(\"héllo, 世界\")\n}\n",
	"emoji 🙂🚀, accents déjà vu, Ελληνικά, русский, 日本語のテキスト",
	"  leading and trailing spaces  \t\r\n",
	"<|endoftext|> is plain text here",
}

func TestNewTokenizer(t *testing.T) {
	for _, tc := range []struct {
		name  string
		vocab int
		eot   int32
	}{
		{"byte", 256, 0},
		{"gpt2", 50257, 50256},
	} {
		tok, err := NewTokenizer(tc.name)
		if err != nil {
			t.Fatalf("NewTokenizer(%q): %v", tc.name, err)
		}
		if tok.Name() != tc.name || tok.VocabSize() != tc.vocab || tok.EOT() != tc.eot {
			t.Errorf("NewTokenizer(%q): name %q vocab %d eot %d, want %q %d %d",
				tc.name, tok.Name(), tok.VocabSize(), tok.EOT(), tc.name, tc.vocab, tc.eot)
		}
	}
}

func TestNewTokenizerUnknown(t *testing.T) {
	_, err := NewTokenizer("sentencepiece")
	if err == nil {
		t.Fatal("NewTokenizer(\"sentencepiece\") succeeded, want error")
	}
	for _, want := range []string{`"sentencepiece"`, "byte", "gpt2"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
}

func TestTokenizerNamesAllConstruct(t *testing.T) {
	names := TokenizerNames()
	if !slices.IsSorted(names) || len(names) != len(tokenizerMakers) {
		t.Fatalf("TokenizerNames() = %v, want the %d known names sorted", names, len(tokenizerMakers))
	}
	for _, name := range names {
		if _, err := NewTokenizer(name); err != nil {
			t.Errorf("NewTokenizer(%q): %v", name, err)
		}
	}
}

func TestTokenizerRoundTrip(t *testing.T) {
	for _, name := range TokenizerNames() {
		tok, err := NewTokenizer(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, text := range roundTripTexts {
			ids := tok.Encode(text)
			for _, id := range ids {
				if id < 0 || int(id) >= tok.VocabSize() || id == tok.EOT() {
					t.Errorf("%s: Encode(%q) produced id %d, want ids in [0,%d) other than EOT %d",
						name, text, id, tok.VocabSize(), tok.EOT())
				}
			}
			if got := tok.Decode(ids); got != text {
				t.Errorf("%s: Decode(Encode(%q)) = %q", name, text, got)
			}
		}
	}
}

func TestByteTokenizerIDs(t *testing.T) {
	tok := byteTokenizer{}
	got := tok.Encode("aé")
	want := []int32{'a', 0xc3, 0xa9}
	if !slices.Equal(got, want) {
		t.Errorf("Encode(\"aé\") = %v, want %v", got, want)
	}
	if got := tok.Decode([]int32{'o', 'k', 300, -1}); got != "ok\uFFFD\uFFFD" {
		t.Errorf("Decode with out-of-range ids = %q, want %q", got, "ok\uFFFD\uFFFD")
	}
}

func TestGPT2KnownIDs(t *testing.T) {
	tok, err := NewTokenizer("gpt2")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		text string
		ids  []int32
	}{
		{"Hello world", []int32{15496, 995}},
		{" the", []int32{262}},
		{"\n\n", []int32{628}},
		{"a\n\nb", []int32{64, 198, 198, 65}},
	} {
		if got := tok.Encode(tc.text); !slices.Equal(got, tc.ids) {
			t.Errorf("Encode(%q) = %v, want %v", tc.text, got, tc.ids)
		}
	}
	if got := tok.Decode([]int32{15496, 50256, 995}); got != "Hello<|endoftext|> world" {
		t.Errorf("Decode with EOT = %q", got)
	}
	if got := tok.Decode([]int32{50257, -3}); got != "\uFFFD\uFFFD" {
		t.Errorf("Decode of out-of-vocabulary ids = %q, want two U+FFFD", got)
	}
}

func TestTokenizerVocabSizeMatchesTokenizers(t *testing.T) {
	for _, name := range TokenizerNames() {
		tok, err := NewTokenizer(name)
		if err != nil {
			t.Fatal(err)
		}
		v, err := TokenizerVocabSize(name)
		if err != nil || v != tok.VocabSize() {
			t.Errorf("TokenizerVocabSize(%q) = %d, %v; the tokenizer has %d", name, v, err, tok.VocabSize())
		}
	}
	if _, err := TokenizerVocabSize("bpe"); err == nil || !strings.Contains(err.Error(), "bpe") {
		t.Errorf("unknown name: got %v, want an error naming it", err)
	}
}

// GPT-2 is a SpecialTokenizer: EncodeWithSpecials makes each
// "<|endoftext|>" of the text EOT and encodes the rest as Encode does,
// which keeps it as text; the byte tokenizer has no special tokens.
func TestGPT2EncodeSpecial(t *testing.T) {
	tok, err := NewTokenizer("gpt2")
	if err != nil {
		t.Fatal(err)
	}
	text := "Hello<|endoftext|><|endoftext|> world<|endoftext"
	var want []int32
	want = append(want, tok.Encode("Hello")...)
	want = append(want, 50256, 50256)
	want = append(want, tok.Encode(" world<|endoftext")...)
	if got := EncodeWithSpecials(tok, text); !slices.Equal(got, want) {
		t.Errorf("EncodeWithSpecials(%q) = %v, want %v", text, got, want)
	}
	if slices.Contains(tok.Encode(text), tok.EOT()) {
		t.Errorf("Encode(%q) contains EOT", text)
	}
	if got := tok.(SpecialTokenizer).SpecialTokens(); len(got) != 1 || got["<|endoftext|>"] != 50256 {
		t.Errorf("SpecialTokens() = %v, want <|endoftext|>: 50256", got)
	}
	b, err := NewTokenizer("byte")
	if err != nil {
		t.Fatal(err)
	}
	if got := EncodeWithSpecials(b, "a<|endoftext|>"); !slices.Equal(got, b.Encode("a<|endoftext|>")) {
		t.Errorf("byte EncodeWithSpecials = %v, want Encode's %v", got, b.Encode("a<|endoftext|>"))
	}
}
