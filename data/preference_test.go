package data

import (
	"slices"
	"strings"
	"testing"
)

// Both forms are read: strings become completion records with one
// prompt, conversations chat records that differ in their last reply; an
// explicit prompt list goes before both conversations.
func TestParsePreferenceRecords(t *testing.T) {
	in := `{"prompt": "Q?", "chosen": " yes", "rejected": " no"}

{"chosen": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}], "rejected": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "go away"}]}
{"prompt": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}], "chosen": [{"role": "assistant", "content": "a"}], "rejected": [{"role": "assistant", "content": "b"}], "id": 7}
`
	recs, err := ParsePreferenceRecords(strings.NewReader(in), "p.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 {
		t.Fatalf("%d records, want 3", len(recs))
	}
	c, r := recs[0].Chosen, recs[0].Rejected
	if c.Kind != CompletionRecord || c.Prompt != "Q?" || c.Completion != " yes" || r.Prompt != "Q?" || r.Completion != " no" || recs[0].Line != 1 {
		t.Errorf("record 1 = %+v", recs[0])
	}
	if recs[1].Line != 3 || recs[1].Chosen.Kind != ChatRecord || recs[1].Rejected.Messages[1].Content != "go away" || recs[1].Chosen.Line != 3 {
		t.Errorf("record 2 = %+v", recs[1])
	}
	want := []Message{{"system", "s"}, {"user", "u"}, {"assistant", "b"}}
	if !slices.Equal(recs[2].Rejected.Messages, want) || len(recs[2].Chosen.Messages) != 3 || recs[2].Chosen.Messages[2].Content != "a" {
		t.Errorf("record 3 = %+v, want rejected %v", recs[2], want)
	}
}

// A bad record is an error naming the file, the line and what is wrong.
func TestParsePreferenceRecordsErrors(t *testing.T) {
	user := `{"role": "user", "content": "hi"}`
	for _, c := range []struct{ line, want string }{
		{`{"prompt": "q", "chosen": "a"}`, `want both "chosen" and "rejected"`},
		{`{"chosen": "a", "rejected": "b"}`, `want a "prompt" string`},
		{`{"prompt": "q", "chosen": "a", "rejected": 3}`, `"rejected" is not a string`},
		{`{"prompt": 1, "chosen": "a", "rejected": "b"}`, `"prompt" is not a string`},
		{`[1, 2]`, "not a JSON object"},
		{`{"chosen": [` + user + `], "rejected": [` + user + `]}`, "want a prompt and an assistant reply"},
		{`{"chosen": [` + user + `, {"role": "user", "content": "x"}], "rejected": [` + user + `, {"role": "assistant", "content": "y"}]}`, `ends with a "user" message`},
		{`{"chosen": [` + user + `, {"role": "bot", "content": "x"}], "rejected": [` + user + `, {"role": "assistant", "content": "y"}]}`, `role "bot"`},
		{`{"chosen": [{"role": "user", "content": "A"}, {"role": "assistant", "content": "x"}], "rejected": [` + user + `, {"role": "assistant", "content": "y"}]}`, "differ before their last message"},
		{`{"chosen": [{"role": "assistant", "content": "A"}, {"role": "assistant", "content": "x"}], "rejected": [{"role": "assistant", "content": "A"}, {"role": "assistant", "content": "y"}]}`, "follows another assistant message"},
		{`{"prompt": "q\u0000", "chosen": "a", "rejected": "b"}`, "NUL"},
	} {
		in := `{"prompt": "ok", "chosen": "a", "rejected": "b"}` + "\n" + c.line + "\n"
		_, err := ParsePreferenceRecords(strings.NewReader(in), "bad.jsonl")
		if err == nil {
			t.Errorf("%s: accepted", c.line)
			continue
		}
		if !strings.HasPrefix(err.Error(), "bad.jsonl:2: ") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %q, want bad.jsonl:2: … %s", c.line, err, c.want)
		}
	}
	if _, err := ParsePreferenceRecords(strings.NewReader("\n\n"), "empty.jsonl"); err == nil || !strings.Contains(err.Error(), "empty.jsonl: no records") {
		t.Errorf("empty file: %v", err)
	}
}

// KeepLastSpan keeps the final reply counted and unflags the earlier
// assistant turns of the shared prompt.
func TestKeepLastSpan(t *testing.T) {
	tok := byteTokenizer{}
	msgs := []Message{{"user", "u"}, {"assistant", "one"}, {"user", "v"}, {"assistant", "two"}}
	full := Render(Record{Kind: ChatRecord, Messages: msgs}, tok, true)
	e := KeepLastSpan(full)
	var counted []int32
	for i, f := range e.Train {
		if f {
			counted = append(counted, e.Tokens[i])
		}
	}
	if got, want := tok.Decode(counted), "two\x00"; got != want {
		t.Errorf("counted %q, want %q", got, want)
	}
	if full.Targets() != 8 || !slices.Equal(e.Tokens, full.Tokens) {
		t.Errorf("rendered example changed: %d targets, want 8 before", full.Targets())
	}
}

// Pair rows put pair i's chosen answer in row 2i and its rejected one in
// row 2i+1, prompts masked; a pair whose answer has no target within the
// context is left out whole.
func TestBuildPairRows(t *testing.T) {
	tok := byteTokenizer{}
	pair := func(p, c, r string) PairExample {
		return PairExample{Chosen: completion(tok, p, c), Rejected: completion(tok, p, r)}
	}
	rows, err := BuildPairRows([]PairExample{pair("ab", "c", "de"), pair("0123456789", "x", "y"), pair("q", "rs", "t")}, 4, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !rows.Pairs || rows.Len() != 4 || rows.NoTargets != 1 {
		t.Fatalf("%d rows (pairs %v), %d left out; want 4 rows of pairs, 1 left out", rows.Len(), rows.Pairs, rows.NoTargets)
	}
	if got, want := tok.Decode(rows.X[:8]), "abc\x00abde"; got != want {
		t.Errorf("first pair's inputs %q, want %q", got, want)
	}
	want := []float32{
		0, 1, 1, 0, // ab|c$ : targets b (prompt), c, EOT, padding
		0, 1, 1, 1, // ab|de$: targets b, d, e, EOT
		1, 1, 1, 0, // q|rs$
		1, 1, 0, 0, // q|t$
	}
	if !slices.Equal(rows.W, want) {
		t.Errorf("W = %v, want %v", rows.W, want)
	}
	if _, err := BuildPairRows([]PairExample{pair("0123456789", "x", "y")}, 4, 0); err == nil {
		t.Error("pairs with no counted target were accepted")
	}
}

// A sampler over pairs draws whole pairs: each batch holds rows 2i and
// 2i+1 side by side, every pair once per epoch, and Index names them.
func TestRowSamplerKeepsPairsTogether(t *testing.T) {
	tok := byteTokenizer{}
	var pairs []PairExample
	for i := 0; i < 6; i++ {
		p := string(rune('a' + i))
		pairs = append(pairs, PairExample{Chosen: completion(tok, p, "c"), Rejected: completion(tok, p, "r")})
	}
	rows, err := BuildPairRows(pairs, 3, 0)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewRowSampler(rows, 5)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewWeightedBatch(3, 2, 3)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.FillBatch(b); err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for k := 0; k < 6; k += 2 {
		c, r := b.Index[k], b.Index[k+1]
		if c%2 != 0 || r != c+1 {
			t.Fatalf("batch rows %d, %d hold rows %d, %d; want a pair 2i, 2i+1", k, k+1, c, r)
		}
		if got := tok.Decode(b.X[k*3 : k*3+3]); got != tok.Decode(rows.X[c*3:c*3+3]) {
			t.Errorf("batch row %d holds %q, want row %d", k, got, c)
		}
		if b.X[(k+1)*3] != b.X[k*3] || b.Y[k*3] != 'c' || b.Y[(k+1)*3] != 'r' {
			t.Errorf("batch rows %d, %d are not one prompt's chosen and rejected answers", k, k+1)
		}
		seen[c] = true
	}
	st := slices.Clone(b.State)
	if err := s.FillBatch(b); err != nil {
		t.Fatal(err)
	}
	for k := 0; k < 6; k += 2 {
		seen[b.Index[k]] = true
	}
	if len(seen) != 6 {
		t.Errorf("an epoch of two batches visited pairs %v, want all 6", seen)
	}
	s2, _ := NewRowSampler(rows, 5)
	if err := s2.SetState(st); err != nil {
		t.Fatal(err)
	}
	b2, _ := NewWeightedBatch(3, 2, 3)
	if err := s2.FillBatch(b2); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(b2.Index, b.Index) {
		t.Errorf("resumed sampler drew rows %v, want %v", b2.Index, b.Index)
	}
	odd, _ := NewWeightedBatch(1, 3, 3)
	if err := s.FillBatch(odd); err == nil || !strings.Contains(err.Error(), "even") {
		t.Errorf("odd batch over pairs: %v", err)
	}
}
