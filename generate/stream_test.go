package generate

import (
	"errors"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/data"
)

// TestTextStream feeds a byte tokenizer's ids one by one: a character
// split over several ids is handed on whole, text that may begin a stop
// string is held back until it cannot, and the text ends before the stop
// string, with ErrStop. The pieces add up to the text.
func TestTextStream(t *testing.T) {
	tok, err := data.NewTokenizer("byte")
	if err != nil {
		t.Fatal(err)
	}
	var pieces []string
	s := &textStream{tok: tok, stops: []string{"STOP", "\n\n"}, onText: func(d string) error { pieces = append(pieces, d); return nil }}
	text := "é🙂 STAR STOP after"
	var stopErr error
	for i := 0; i < len(text) && stopErr == nil; i++ {
		stopErr = s.push(int32(text[i]))
		for _, p := range pieces {
			if strings.ContainsRune(p, '\uFFFD') || strings.Contains(p, "STOP") {
				t.Fatalf("after %q: handed on %q", text[:i+1], pieces)
			}
		}
		if i == len("é🙂 ST")-1 && strings.Join(pieces, "") != "é🙂 " {
			t.Fatalf("after %q: handed on %q, want \"é🙂 \" (\"ST\" may begin STOP)", text[:i+1], pieces)
		}
	}
	if !errors.Is(stopErr, ErrStop) {
		t.Fatalf("push returned %v, want ErrStop", stopErr)
	}
	got, err := s.finish()
	if err != nil || got != "é🙂 STAR " || strings.Join(pieces, "") != got {
		t.Fatalf("text %q (%v), pieces %q; want \"é🙂 STAR \"", got, err, pieces)
	}
}
