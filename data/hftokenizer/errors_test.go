package hftokenizer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// minimalJSON is a tokenizer.json with a three-token vocabulary, one
// merge and one special token, into which the cases below put one bad
// component each.
const minimalJSON = `{
  "added_tokens": [{"id": 3, "content": "<eos>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}],
  "normalizer": NORMALIZER,
  "pre_tokenizer": PRETOKENIZER,
  "decoder": DECODER,
  "model": {"type": MODEL, "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": MERGES}
}`

// Files with a component this package does not implement, or with a
// malformed one, fail to load with an error naming the component and what
// was wanted; the well-formed minimal file loads and merges.
func TestUnsupportedComponents(t *testing.T) {
	fill := func(repl ...string) string {
		s := minimalJSON
		defaults := map[string]string{"NORMALIZER": "null", "PRETOKENIZER": "null", "DECODER": "null", "MODEL": `"BPE"`, "MERGES": `["a b"]`}
		for i := 0; i < len(repl); i += 2 {
			defaults[repl[i]] = repl[i+1]
		}
		for k, v := range defaults {
			s = strings.ReplaceAll(s, k, v)
		}
		return s
	}
	load := func(t *testing.T, contents string) (*Tokenizer, error) {
		t.Helper()
		path := filepath.Join(t.TempDir(), "tokenizer.json")
		if err := os.WriteFile(path, []byte(contents), 0o644); err != nil {
			t.Fatal(err)
		}
		return Load(path)
	}
	tok, err := load(t, fill())
	if err != nil {
		t.Fatal(err)
	}
	// Without an unknown token, characters outside the vocabulary are
	// left out, as tokenizers leaves them out (it gives [2 2] and []).
	if got := tok.Encode("abxab"); len(got) != 2 || got[0] != 2 || got[1] != 2 {
		t.Errorf("Encode(abxab) = %v, want [2 2]", got)
	}
	if got := tok.Encode("x"); len(got) != 0 {
		t.Errorf("Encode(x) = %v, want no ids", got)
	}
	for _, tc := range []struct {
		name string
		file string
		want []string
	}{
		{"normalizer", fill("NORMALIZER", `{"type": "Lowercase"}`), []string{`normalizer type "Lowercase" is not supported`, "NFC"}},
		{"nested normalizer", fill("NORMALIZER", `{"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "BertNormalizer"}]}`), []string{`"BertNormalizer"`}},
		{"pre-tokenizer", fill("PRETOKENIZER", `{"type": "BertPreTokenizer"}`), []string{`pre_tokenizer type "BertPreTokenizer" is not supported`, "ByteLevel"}},
		{"split behavior", fill("PRETOKENIZER", `{"type": "Split", "pattern": {"String": " "}, "behavior": "Sideways", "invert": false}`), []string{`behavior "Sideways"`, "Isolated"}},
		{"regex", fill("PRETOKENIZER", `{"type": "Split", "pattern": {"Regex": "(unclosed"}, "behavior": "Isolated", "invert": false}`), []string{`regular expression "(unclosed"`}},
		{"pattern", fill("PRETOKENIZER", `{"type": "Split", "pattern": {"Glob": "*"}, "behavior": "Isolated", "invert": false}`), []string{`want {"String": ...} or {"Regex": ...}`}},
		{"metaspace", fill("PRETOKENIZER", `{"type": "Metaspace", "replacement": "__", "prepend_scheme": "always"}`), []string{`replacement "__", want one character`}},
		{"decoder", fill("DECODER", `{"type": "WordPiece"}`), []string{`decoder type "WordPiece" is not supported`, "ByteFallback"}},
		{"model", fill("MODEL", `"WordPiece"`), []string{`model type "WordPiece" is not supported; want BPE`}},
		{"merge", fill("MERGES", `["a c"]`), []string{`merge 0 ("a", "c")`, "not in the vocabulary"}},
		{"merge form", fill("MERGES", `["ab"]`), []string{`"ab", want two tokens separated by a space`}},
		{"not json", "{", []string{"not a valid tokenizer.json"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := load(t, tc.file)
			if err == nil {
				t.Fatalf("loads; want an error saying %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}
