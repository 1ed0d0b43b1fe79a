package chattemplate

import (
	"strings"
	"testing"
	"time"

	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/internal/tokentest"
)

// specialTokenizer has the special tokens of the ChatML, Llama 3 and
// Mistral templates, and "<|im_start|>" and "<|im_end|>" as prefixes of
// longer ones, so a longest-match mistake would show.
func specialTokenizer() *tokentest.Bytes {
	return tokentest.NewBytes("<|im_end|>", "<|im_start|>", "<|im_end|>", "<|im_end|>x", "<|begin_of_text|>",
		"<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<s>", "</s>")
}

// testTemplate compiles testdata/file with the clock fixed.
func testTemplate(t *testing.T, file, bos, eos string) *Template {
	t.Helper()
	tpl, err := New(readTemplate(t, file), bos, eos)
	if err != nil {
		t.Fatal(err)
	}
	tpl.Now = func() time.Time { return testNow }
	return tpl
}

// counted returns the runs of consecutive counted tokens of ex, decoded.
func counted(ex data.Example, tok data.Tokenizer) []string {
	var runs []string
	var cur []int32
	for i, id := range ex.Tokens {
		if ex.Train[i] {
			cur = append(cur, id)
			continue
		}
		if cur != nil {
			runs = append(runs, tok.Decode(cur))
			cur = nil
		}
	}
	if cur != nil {
		runs = append(runs, tok.Decode(cur))
	}
	return runs
}

// TestEncodeCountsAssistantTurns renders multi-turn conversations with
// the SmolLM2, Llama 3.2 and Qwen2.5 templates (and Mistral v0.3's
// without a system message) and checks that the counted tokens are
// exactly each assistant content followed by the template's end-of-turn
// token, in order, that all tokens together are the whole rendering, and
// that the special tokens became their ids.
func TestEncodeCountsAssistantTurns(t *testing.T) {
	tok := specialTokenizer()
	multi := []data.Message{
		{Role: "system", Content: "You answer briefly."},
		{Role: "user", Content: "What is the capital of France?"},
		{Role: "assistant", Content: "Paris."},
		{Role: "user", Content: "And of Italy?\nThanks."},
		{Role: "assistant", Content: "Rome, the\ncapital since 1871."},
		{Role: "user", Content: "Germany?"},
		{Role: "assistant", Content: "Berlin 🙂"},
	}
	for _, tc := range []struct {
		file, bos, eos, end string
		msgs                []data.Message
		prefix              string // what the template writes before each content
	}{
		{"smollm2.jinja", "<|im_start|>", "<|im_end|>", "<|im_end|>", multi, ""},
		{"smollm2.jinja", "<|im_start|>", "<|im_end|>", "<|im_end|>", multi[1:], ""},
		{"llama-3.2.jinja", "<|begin_of_text|>", "<|eot_id|>", "<|eot_id|>", multi, ""},
		{"qwen-2.5.jinja", "", "<|im_end|>", "<|im_end|>", multi, ""},
		{"qwen-2.5.jinja", "", "<|im_end|>", "<|im_end|>", multi[1:5], ""},
		{"mistral-v0.3.jinja", "<s>", "</s>", "</s>", multi[1:], " "},
	} {
		tpl := testTemplate(t, tc.file, tc.bos, tc.eos)
		end, err := tpl.EndOfTurn(tok)
		if err != nil || end != tc.end {
			t.Fatalf("%s: end of turn %q, %v; want %q", tc.file, end, err, tc.end)
		}
		ex, err := tpl.Encode(tc.msgs, tok, true)
		if err != nil {
			t.Fatalf("%s: %v", tc.file, err)
		}
		var want []string
		for _, m := range tc.msgs {
			if m.Role == "assistant" {
				want = append(want, tc.prefix+m.Content+tc.end)
			}
		}
		got := counted(ex, tok)
		if strings.Join(got, "|") != strings.Join(want, "|") || len(got) != len(want) {
			t.Errorf("%s (%d messages): counted %q, want %q", tc.file, len(tc.msgs), got, want)
		}
		full, err := tpl.Render(tc.msgs, false)
		if err != nil {
			t.Fatal(err)
		}
		if dec := tok.Decode(ex.Tokens); dec != full {
			t.Errorf("%s: the tokens decode to %q, the rendering is %q", tc.file, dec, full)
		}
		if n := len(tok.EncodeSpecial(full)); n != len(ex.Tokens) {
			t.Errorf("%s: %d tokens, the rendering encodes to %d", tc.file, len(ex.Tokens), n)
		}
		if len(ex.Tokens) == len(full) {
			t.Errorf("%s: as many tokens as bytes: the special tokens were encoded as text", tc.file)
		}
		all, err := tpl.Encode(tc.msgs, tok, false)
		if err != nil {
			t.Fatal(err)
		}
		if all.Targets() != len(all.Tokens) || len(all.Tokens) != len(ex.Tokens) {
			t.Errorf("%s without masking: %d of %d tokens count, want all %d", tc.file, all.Targets(), len(all.Tokens), len(ex.Tokens))
		}
	}
}

// TestEncodeRefusesUnstableTemplates: Mistral v0.3's template puts the
// system message into the last user turn, so an earlier reply renders
// differently once later turns follow; Encode says which message instead
// of counting the wrong tokens. A template that raises is an error too.
func TestEncodeRefusesUnstableTemplates(t *testing.T) {
	tok := specialTokenizer()
	tpl := testTemplate(t, "mistral-v0.3.jinja", "<s>", "</s>")
	msgs := []data.Message{{Role: "system", Content: "S"}, {Role: "user", Content: "Q"}, {Role: "assistant", Content: "A"}}
	if _, err := tpl.Encode(msgs, tok, true); err == nil || !strings.Contains(err.Error(), "message 3 (assistant)") {
		t.Fatalf("Mistral with a system message: %v, want an error naming message 3", err)
	}
	bad := []data.Message{{Role: "user", Content: "a"}, {Role: "user", Content: "b"}}
	if _, err := tpl.Encode(bad, tok, true); err == nil || !strings.Contains(err.Error(), "alternate") {
		t.Fatalf("two user turns: %v, want the template's raise_exception message", err)
	}
}

// TestPromptEndsWithGenerationPrompt: the prompt is the conversation
// rendered with the assistant header, special tokens as ids.
func TestPromptEndsWithGenerationPrompt(t *testing.T) {
	tok := specialTokenizer()
	tpl := testTemplate(t, "smollm2.jinja", "<|im_start|>", "<|im_end|>")
	ids, err := tpl.Prompt([]data.Message{{Role: "user", Content: "Hi"}}, tok)
	if err != nil {
		t.Fatal(err)
	}
	const want = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
	if got := tok.Decode(ids); got != want {
		t.Fatalf("prompt %q, want %q", got, want)
	}
	if ids[0] != tok.SpecialTokens()["<|im_start|>"] {
		t.Fatalf("prompt starts with id %d, want <|im_start|>'s %d", ids[0], tok.SpecialTokens()["<|im_start|>"])
	}
}

// A template that refuses a conversation without a system message still
// has its end-of-turn token found; one that renders no reply at all is an
// error.
func TestEndOfTurnProbes(t *testing.T) {
	tok := specialTokenizer()
	const needsSystem = `{% if messages[0].role != 'system' %}{{ raise_exception('system first') }}{% endif %}` +
		`{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}`
	tpl, err := New(needsSystem, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if end, err := tpl.EndOfTurn(tok); err != nil || end != "<|im_end|>" {
		t.Fatalf("end of turn %q, %v; want <|im_end|>", end, err)
	}
	silent, err := New(`{% for m in messages %}{% if m.role == 'user' %}{{ m.content }}{% endif %}{% endfor %}`, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := silent.EndOfTurn(tok); err == nil || !strings.Contains(err.Error(), "without its content") {
		t.Fatalf("a template that drops replies: %v", err)
	}
}
