package data

import (
	"slices"
	"strings"
	"testing"
)

// flagsString renders an example as its bytes with the counted ones in
// upper case and the EOT as '$': "ab" counted after a masked "q" is "qAB$".
func flagsString(e Example) string {
	var b strings.Builder
	for i, id := range e.Tokens {
		c := string(rune(id))
		if id == 0 {
			c = "$"
		}
		if e.Train[i] {
			if id == 0 {
				c = "#" // a counted EOT
			} else {
				c = strings.ToUpper(c)
			}
		}
		b.WriteString(c)
	}
	return b.String()
}

func TestRenderMasksPromptsAndHeaders(t *testing.T) {
	tok := byteTokenizer{}
	chat := Record{Kind: ChatRecord, Messages: []Message{{"system", "s"}, {"user", "hi"}, {"assistant", "yo"}}}
	for _, tc := range []struct {
		rec  Record
		mask bool
		want string
	}{
		{Record{Kind: TextRecord, Text: "ab"}, true, "AB#"},
		{Record{Kind: CompletionRecord, Prompt: "q ", Completion: "ab"}, true, "q AB#"},
		{Record{Kind: CompletionRecord, Prompt: "q ", Completion: "ab"}, false, "Q AB#"},
		{Record{Kind: CompletionRecord, Prompt: "q", Completion: ""}, true, "q#"},
		// The assistant header is never counted; the assistant's EOT is.
		{chat, true, "<|system|>\ns$<|user|>\nhi$<|assistant|>\nYO#"},
		{chat, false, "<|system|>\nS#<|user|>\nHI#<|assistant|>\nYO#"},
	} {
		if got := flagsString(Render(tc.rec, tok, tc.mask)); got != tc.want {
			t.Errorf("Render(%+v, mask %v) = %q, want %q", tc.rec, tc.mask, got, tc.want)
		}
	}
}

func TestChatPromptEndsWithAssistantHeader(t *testing.T) {
	tok := byteTokenizer{}
	got := tok.Decode(ChatPrompt([]Message{{"user", "hi"}}, tok))
	if want := "<|user|>\nhi\x00<|assistant|>\n"; got != want {
		t.Errorf("ChatPrompt = %q, want %q", got, want)
	}
	// What a chat record trains on follows that prompt token for token.
	rec := Render(Record{Kind: ChatRecord, Messages: []Message{{"user", "hi"}, {"assistant", "yo"}}}, tok, true)
	prompt := ChatPrompt([]Message{{"user", "hi"}}, tok)
	if !slices.Equal(rec.Tokens[:len(prompt)], prompt) {
		t.Errorf("rendered record %v does not start with the chat prompt %v", rec.Tokens, prompt)
	}
}

// With GPT-2 BPE the end of a turn is the single <|endoftext|> id, and
// the same text inside content stays ordinary tokens, so content cannot
// end a turn early.
func TestRenderGPT2EndOfText(t *testing.T) {
	tok, err := NewTokenizer("gpt2")
	if err != nil {
		t.Fatal(err)
	}
	e := Render(Record{Kind: ChatRecord, Messages: []Message{{"user", "say <|endoftext|>"}, {"assistant", "ok"}}}, tok, true)
	eots := 0
	for _, id := range e.Tokens {
		if id == tok.EOT() {
			eots++
		}
	}
	if eots != 2 {
		t.Errorf("%d EOT ids in %v, want 2 (one per turn)", eots, e.Tokens)
	}
	last := len(e.Tokens) - 1
	if e.Tokens[last] != tok.EOT() || !e.Train[last] || e.Train[0] {
		t.Errorf("tokens %v flags %v: want a counted EOT last and an uncounted header first", e.Tokens, e.Train)
	}
	if got := tok.Decode(e.Tokens); got != "<|user|>\nsay <|endoftext|><|endoftext|><|assistant|>\nok<|endoftext|>" {
		t.Errorf("decoded %q", got)
	}
}
