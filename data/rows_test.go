package data

import (
	"slices"
	"testing"
)

func completion(tok Tokenizer, prompt, completion string) Example {
	return Render(Record{Kind: CompletionRecord, Prompt: prompt, Completion: completion}, tok, true)
}

// The weight of target t+1 is the flag of token t+1: the prediction of the
// first completion token, made at the last prompt token, counts; the
// prediction of the last prompt token does not.
func TestRowsWeighTheTargetToken(t *testing.T) {
	tok := byteTokenizer{}
	rows, err := BuildRows([]Example{completion(tok, "ab", "cd")}, 6, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := tok.Decode(rows.X), "abcd\x00\x00"; got != want {
		t.Errorf("X = %q, want %q", got, want)
	}
	if got, want := tok.Decode(rows.Y), "bcd\x00\x00\x00"; got != want {
		t.Errorf("Y = %q, want %q", got, want)
	}
	// targets b (prompt), c, d, EOT (completion), then two padding slots
	if want := []float32{0, 1, 1, 1, 0, 0}; !slices.Equal(rows.W, want) {
		t.Errorf("W = %v, want %v", rows.W, want)
	}
}

// An example longer than the context is cut; a prompt that fills the
// context leaves a row with no counted target; an empty completion counts
// only its EOT; one token alone has no target and is left out.
func TestRowsEdgeCases(t *testing.T) {
	tok := byteTokenizer{}
	rows, err := BuildRows([]Example{
		completion(tok, "0123456789", "x"), // prompt fills the context
		completion(tok, "ab", ""),          // empty completion
		{Tokens: []int32{5}, Train: []bool{true}},
		completion(tok, "a", "bcdefghij"), // longer than the context
	}, 4, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	if rows.Len() != 3 || rows.Truncated != 2 || rows.NoTargets != 1 {
		t.Fatalf("%d rows, %d truncated, %d without targets; want 3, 2, 1", rows.Len(), rows.Truncated, rows.NoTargets)
	}
	want := []float32{
		0, 0, 0, 0, // "0123" → "1234": all prompt
		0, 1, 0, 0, // "ab$" : targets b, EOT, padding
		1, 1, 1, 1, // "abcde" cut: targets b c d e
	}
	if !slices.Equal(rows.W, want) {
		t.Errorf("W = %v, want %v", rows.W, want)
	}
	if _, err := BuildRows([]Example{completion(tok, "0123456789", "x")}, 4, 0, false); err == nil {
		t.Error("rows with no counted target at all were accepted")
	}
}

// Packed rows hold the examples back to back: every token but the first
// is the target of exactly one position, with its own flag unless it
// starts an example (no example predicts the next one's first token); Seg
// numbers each row's examples from 0, padding after them one more.
func TestPackedRowsCoverEveryTokenOnce(t *testing.T) {
	tok := byteTokenizer{}
	exs := []Example{completion(tok, "ab", "cd"), completion(tok, "e", "fgh"), completion(tok, "ij", "k")}
	rows, err := BuildRows(exs, 4, 0, true)
	if err != nil {
		t.Fatal(err)
	}
	var stream, docs []int32
	var flags []bool
	for k, e := range exs {
		stream, flags = append(stream, e.Tokens...), append(flags, e.Train...)
		for range e.Tokens {
			docs = append(docs, int32(k))
		}
	}
	if len(rows.Seg) != len(rows.X) {
		t.Fatalf("%d segment ids for %d positions", len(rows.Seg), len(rows.X))
	}
	n := len(stream) - 1 // targets
	if want := (n + 3) / 4; rows.Len() != want {
		t.Fatalf("%d rows, want %d", rows.Len(), want)
	}
	for i := 0; i < n; i++ {
		if rows.X[i] != stream[i] || rows.Y[i] != stream[i+1] {
			t.Fatalf("position %d: x %d y %d, want %d %d", i, rows.X[i], rows.Y[i], stream[i], stream[i+1])
		}
		if w, want := rows.W[i], flags[i+1] && docs[i] == docs[i+1]; (w == 1) != want {
			t.Fatalf("position %d: weight %g, want it counted: %v", i, w, want)
		}
		if want := docs[i] - docs[i/4*4]; rows.Seg[i] != want {
			t.Fatalf("position %d: segment %d, want %d", i, rows.Seg[i], want)
		}
	}
	for i := n; i < len(rows.W); i++ {
		if rows.W[i] != 0 || rows.Seg[i] != rows.Seg[n-1]+1 {
			t.Fatalf("padding position %d has weight %g, segment %d", i, rows.W[i], rows.Seg[i])
		}
	}
	unpacked, err := BuildRows(exs, 4, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	if unpacked.Seg != nil {
		t.Error("rows of one example each have segments")
	}
}

// An epoch visits every row once, and a sampler restored from a batch's
// state continues with the same batches.
func TestRowSamplerEpochsAndResume(t *testing.T) {
	tok := byteTokenizer{}
	var exs []Example
	for i := 0; i < 10; i++ {
		exs = append(exs, completion(tok, string(rune('a'+i)), "xyz"))
	}
	rows, err := BuildRows(exs, 4, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewRowSampler(rows, 7)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewWeightedBatch(1, 5, 4)
	seen := map[int32]int{}
	for k := 0; k < 2; k++ {
		if err := s.FillBatch(b); err != nil {
			t.Fatal(err)
		}
		for r := 0; r < 5; r++ {
			seen[b.X[r*4]]++
		}
	}
	if len(seen) != 10 {
		t.Errorf("one epoch drew %d distinct rows, want all 10: %v", len(seen), seen)
	}
	state := slices.Clone(b.State)
	var next [][]int32
	for k := 0; k < 3; k++ {
		s.FillBatch(b)
		next = append(next, slices.Clone(b.X))
	}
	r, _ := NewRowSampler(rows, 7)
	if err := r.SetState(state); err != nil {
		t.Fatal(err)
	}
	for k := 0; k < 3; k++ {
		r.FillBatch(b)
		if !slices.Equal(b.X, next[k]) {
			t.Fatalf("resumed batch %d differs", k)
		}
	}
	other, _ := BuildRows(exs[:5], 4, 0, false)
	o, _ := NewRowSampler(other, 7)
	if err := o.SetState(state); err == nil {
		t.Error("a state over 10 rows restored into a sampler over 5")
	}
}
