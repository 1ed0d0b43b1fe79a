package data

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// variedTexts returns texts that exercise every branch of GPT-2's
// pre-tokenizer: contractions, runs of each class with and without a
// leading space, whitespace runs of every kind, and random strings over
// characters from each class, including Unicode spaces and marks.
func variedTexts(t *testing.T) []string {
	t.Helper()
	texts := []string{
		"", " ", "  ", "\n", "a", " a", "  a", "\n\na", "a \n b", "I'm he's we'll they've you're I'd it's 'S 'LL",
		"x  \t\ty", "end   ", "tab\t\tz", "\u00a0word \u2028line\u3000ideo", "naïve café 日本語 ১২৩ Ⅻ ½",
		"e\u0301 combining", "emoji 😀😀 ok", "symbols!!! ??? ... ---", "123 4567 89a b12", "\x1c\x1d\x1e\x1f sep",
		"\u0085next\u200bzero\u00adsoft", "''' 'x 're're", "a\r\nb\r\n\r\n", strings.Repeat("ab", 300),
	}
	src, err := os.ReadFile(filepath.Join(runtime.GOROOT(), "src", "fmt", "print.go"))
	if err == nil {
		texts = append(texts, string(src))
	}
	alphabet := []rune("aZ09 '\n\t\r\u00a0\u2003\u3000\u0085\x1cé日½\u0301😀!.-_sltmdrevSLT")
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		n := rng.IntN(24)
		r := make([]rune, n)
		for i := range r {
			r[i] = alphabet[rng.IntN(len(alphabet))]
		}
		texts = append(texts, string(r))
	}
	return texts
}

func TestBPEDropoutZeroIsGPT2(t *testing.T) {
	b, err := NewBPEDropout(0)
	if err != nil {
		t.Fatal(err)
	}
	g := newGPT2()
	for _, text := range variedTexts(t) {
		want := g.codecEncode(text)
		if got := b.Encode(nil, text, nil); !slices.Equal(got, want) {
			t.Fatalf("Encode(%q) with p = 0 = %v, want the tiktoken-go codec's %v", text, got, want)
		}
		if got := g.Encode(text); !slices.Equal(got, want) {
			t.Fatalf("gpt2 Encode(%q) = %v, want the tiktoken-go codec's %v", text, got, want)
		}
	}
}

func TestBPEDropoutVariesAndDecodes(t *testing.T) {
	b, err := NewBPEDropout(0.3)
	if err != nil {
		t.Fatal(err)
	}
	g := newGPT2()
	text := "The tokenizer drops merges, so unbelievable words split differently.\nfunc main() { fmt.Println(x) }"
	base := g.encodeChunk(text)
	seen := map[string]bool{}
	longer := 0
	for seed := range uint64(50) {
		ids := b.Encode(nil, text, rand.New(rand.NewPCG(seed, 0)))
		if got := g.Decode(ids); got != text {
			t.Fatalf("seed %d: ids decode to %q, want the text back", seed, got)
		}
		if len(ids) > len(base) {
			longer++
		}
		seen[g.Decode(ids[:1])+"|"+strings.Repeat("x", len(ids))] = true
		for _, id := range ids {
			if id < 0 || id >= gpt2EOT {
				t.Fatalf("seed %d: id %d outside GPT-2's text ids", seed, id)
			}
		}
	}
	if len(seen) < 5 || longer < 45 {
		t.Fatalf("50 seeds gave %d distinct segmentations, %d longer than GPT-2's %d ids; want varied, finer segmentations", len(seen), longer, len(base))
	}
	// The same seeds give the same ids, whatever the scheduling.
	texts := []string{text, "another text", text}
	seeds := []uint64{7, 8, 7}
	a, c := b.EncodeBatch(texts, seeds), b.EncodeBatch(texts, seeds)
	for i := range texts {
		if !slices.Equal(a[i], c[i]) {
			t.Fatalf("EncodeBatch text %d differs between two runs with the same seeds", i)
		}
	}
	if !slices.Equal(a[0], a[2]) {
		t.Fatalf("texts 0 and 2, the same text with the same seed, encode differently")
	}
}

func TestNewBPEDropoutRejectsBadP(t *testing.T) {
	for _, p := range []float64{-0.1, 1, 2} {
		if _, err := NewBPEDropout(p); err == nil || !strings.Contains(err.Error(), "want a number in [0, 1)") {
			t.Errorf("NewBPEDropout(%v) = %v, want a range error", p, err)
		}
	}
}
