package hftokenizer

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

// unicode15 are the blocks and characters with letters or numbers that
// Unicode 15.0 added. Go's tables (unicode.Version 15.0.0) have them and
// the Oniguruma that tokenizers links does not (Unicode 14), so the two
// classify them differently: Kawi, Egyptian hieroglyph format controls,
// Kaktovik numerals, Latin Extended-G's additions, Cyrillic Extended-D,
// Nag Mundari, Arabic Extended-C, Devanagari Extended-A and Khojki's
// additions.
var unicode15 = [][2]rune{
	{0x10EC0, 0x10EFF}, {0x1123F, 0x11241}, {0x11B00, 0x11B5F}, {0x11F00, 0x11F5F},
	{0x1342F, 0x1345F}, {0x1D2C0, 0x1D2DF}, {0x1DF25, 0x1DF2A}, {0x1E030, 0x1E08F},
	{0x1E4D0, 0x1E4FF},
}

// inUnicode15 reports whether r is in unicode15.
func inUnicode15(r rune) bool {
	for _, rg := range unicode15 {
		if rg[0] <= r && r <= rg[1] {
			return true
		}
	}
	return false
}

// unicodeText puts every code point of the Basic Multilingual Plane
// (surrogates and NUL left out) and every fifth of the next plane (less
// unicode15) between letters, digits, spaces, an apostrophe and a
// newline, so that a pattern's \p{L}, \p{N}, \s and (?i:'s) classes
// decide every piece boundary around it.
func unicodeText() string {
	var b strings.Builder
	for r := rune(1); r < 0x20000; r++ {
		if !utf8.ValidRune(r) || r >= 0x10000 && (r%5 != 0 || inUnicode15(r)) {
			continue
		}
		b.WriteString("x")
		b.WriteRune(r)
		b.WriteString("x 1")
		b.WriteRune(r)
		b.WriteString("1 '")
		b.WriteRune(r)
		b.WriteString(" ")
		b.WriteRune(r)
		b.WriteString("\n")
	}
	return b.String()
}

// comparePieces pre-tokenizes text with each pre_tokenizer of configs
// (tokenizer.json objects by name), here and with tokenizers, and fails
// where the pieces differ.
func comparePieces(t *testing.T, text string, configs map[string]string) {
	t.Helper()
	py := python(t)
	dir := t.TempDir()
	textPath, configsPath, outPath := filepath.Join(dir, "text.txt"), filepath.Join(dir, "configs.json"), filepath.Join(dir, "pieces.json")
	raw := map[string]json.RawMessage{}
	for name, c := range configs {
		raw[name] = json.RawMessage(c)
	}
	cfg, err := json.Marshal(raw)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(textPath, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(configsPath, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, filepath.Join("testdata", "pieces.py"), textPath, configsPath, outPath)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("pieces.py: %v\n%s", err, out)
	}
	b, err := os.ReadFile(outPath)
	if err != nil {
		t.Fatal(err)
	}
	var want map[string][]string
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	for name, c := range configs {
		pt, err := parsePreTokenizer(json.RawMessage(c))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got := pt.preTokenize([]piece{{text: text, atStart: true}})
		w := want[name]
		if len(w) == 0 {
			t.Fatalf("%s: tokenizers gave no pieces", name)
		}
		for i := range min(len(got), len(w)) {
			if got[i].text != w[i] {
				t.Errorf("%s: piece %d is %q, tokenizers' %q (then %q)", name, i, got[i].text, w[i], w[i+1:min(len(w), i+4)])
				break
			}
		}
		if len(got) != len(w) {
			t.Errorf("%s: %d pieces, tokenizers %d", name, len(got), len(w))
		}
	}
}

// splitConfig is a Split pre-tokenizer's JSON.
func splitConfig(pattern, behavior string, invert bool) string {
	b, _ := json.Marshal(map[string]any{"type": "Split", "pattern": json.RawMessage(pattern), "behavior": behavior, "invert": invert})
	return string(b)
}

// Llama 3's Split pattern on regexp2 (Qwen2's has the same classes),
// ByteLevel's GPT-2 pattern on data's hand-written matcher, and Digits
// classify every code point of the first two planes as tokenizers
// (Oniguruma, Rust's char) does: the pieces of unicodeText are the same. Letters and numbers new
// in Unicode 15.0 are left out (see unicode15).
func TestPiecesMatchTokenizers(t *testing.T) {
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	comparePieces(t, unicodeText(), map[string]string{
		"llama3":    splitConfig(`{"Regex": `+q(llama3Pattern)+`}`, "Isolated", false),
		"bytelevel": `{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}`,
		"digits":    `{"type": "Digits", "individual_digits": false}`,
	})
}

// Every Split behavior, inverted or not, with a String and a Regex
// pattern; ByteLevel with and without a prefix space and its regex;
// Metaspace with each prepend scheme, split or not, after Digits (which
// makes pieces that do not start the text); and Sequence, cut a text of
// stress samples as tokenizers cuts it.
func TestPreTokenizerConfigsMatchTokenizers(t *testing.T) {
	configs := map[string]string{}
	for _, b := range []string{"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"} {
		for _, inv := range []bool{false, true} {
			for pname, p := range map[string]string{"string": `{"String": " "}`, "regex": `{"Regex": "\\s+|\\d|(?i:ab)"}`} {
				configs[fmt.Sprintf("split-%s-%s-%v", pname, b, inv)] = splitConfig(p, b, inv)
			}
		}
	}
	for _, prefix := range []bool{false, true} {
		for _, re := range []bool{false, true} {
			configs[fmt.Sprintf("bytelevel-%v-%v", prefix, re)] = fmt.Sprintf(`{"type": "ByteLevel", "add_prefix_space": %v, "trim_offsets": true, "use_regex": %v}`, prefix, re)
		}
	}
	for _, scheme := range []string{"always", "first", "never"} {
		for _, split := range []bool{false, true} {
			configs[fmt.Sprintf("metaspace-%s-%v", scheme, split)] = fmt.Sprintf(`{"type": "Sequence", "pretokenizers": [
				{"type": "Digits", "individual_digits": true},
				{"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": %q, "split": %v}]}`, scheme, split)
		}
	}
	configs["metaspace-legacy"] = `{"type": "Metaspace", "replacement": "\u2581", "add_prefix_space": true}`
	configs["digits-individual"] = `{"type": "Digits", "individual_digits": true}`
	var short []string // the samples less the long runs
	for _, s := range stressSamples {
		if len(s) < 10_000 {
			short = append(short, s)
		}
	}
	comparePieces(t, strings.Join(short, " \u2581"), configs)
}

// llama3Pattern is Llama 3's pre-tokenizer pattern, as its tokenizer.json
// gives it.
const llama3Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
