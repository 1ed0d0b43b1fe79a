package chattemplate

import (
	"fmt"
	"strings"
	"time"

	"github.com/posttrainllm/posttrainllm/data"
)

// Prompt renders messages with the generation prompt (the header an
// assistant reply follows) and encodes the text with the tokenizer's
// special tokens matched as their ids (data.EncodeWithSpecials): the
// prompt a model continues with its reply.
func (t *Template) Prompt(messages []data.Message, tok data.Tokenizer) ([]int32, error) {
	text, err := t.Render(messages, true)
	if err != nil {
		return nil, err
	}
	return data.EncodeWithSpecials(tok, text), nil
}

// endProbe is the assistant content EndOfTurn renders: text no template
// adds to or trims.
const endProbe = "Probe-reply-7c1f2e"

// EndOfTurn returns the text of the special token the template closes an
// assistant turn with ("<|im_end|>" for ChatML, "<|eot_id|>" for Llama 3,
// "</s>" for Mistral), found by rendering a user turn and an assistant
// reply and reading what follows the reply: the longest of tok's special
// tokens (data.SpecialTokenizer) and the template's eos_token that the
// text there starts with. It returns "" when no such token follows, as
// for a template that ends turns with plain text. A template that
// refuses a lone user turn is probed after a system message.
func (t *Template) EndOfTurn(tok data.Tokenizer) (string, error) {
	t = t.pinned()
	reply, err := t.probeReply(nil)
	if err != nil {
		// Some templates want a system message first.
		var err2 error
		if reply, err2 = t.probeReply([]data.Message{{Role: "system", Content: "Be brief."}}); err2 != nil {
			return "", err
		}
	}
	i := strings.LastIndex(reply, endProbe)
	if i < 0 {
		return "", fmt.Errorf("chat template: an assistant reply %q renders as %q, without its content", endProbe, reply)
	}
	rest := reply[i+len(endProbe):]
	var candidates []string
	if s, ok := tok.(data.SpecialTokenizer); ok {
		for text := range s.SpecialTokens() {
			candidates = append(candidates, text)
		}
	}
	if t.EOS != "" {
		candidates = append(candidates, t.EOS)
	}
	best := ""
	for _, c := range candidates {
		if c != "" && len(c) > len(best) && strings.HasPrefix(rest, c) {
			best = c
		}
	}
	return best, nil
}

// probeReply renders first, a user turn and the reply endProbe, and
// returns the text the reply adds to the user turn rendered with the
// generation prompt.
func (t *Template) probeReply(first []data.Message) (string, error) {
	msgs := append(first, data.Message{Role: "user", Content: "Hello"})
	prompt, err := t.Render(msgs, true)
	if err != nil {
		return "", err
	}
	full, err := t.Render(append(msgs, data.Message{Role: "assistant", Content: endProbe}), false)
	if err != nil {
		return "", err
	}
	if !strings.HasPrefix(full, prompt) {
		return "", fmt.Errorf("chat template: a user turn rendered with the generation prompt (%q) is not the start of the same turn followed by a reply (%q)", prompt, full)
	}
	return full[len(prompt):], nil
}

// pinned returns a copy of t whose clock is stopped at the current time,
// so that the several renders of one conversation agree on strftime_now.
func (t *Template) pinned() *Template {
	now := time.Now()
	if t.Now != nil {
		now = t.Now()
	}
	c := *t
	c.Now = func() time.Time { return now }
	return &c
}

// Encode renders a conversation with the template and encodes it (special
// tokens as their ids, data.EncodeWithSpecials), flagging the tokens that
// count in a fine-tune's loss. With maskPrompt, those are each assistant
// turn's content and the end-of-turn token that closes it (EndOfTurn),
// never system or user turns, role headers or what the template writes
// after the end-of-turn token; without, every token counts.
//
// Assistant turns are found by rendering, not by guessing token
// boundaries: turn i spans from the end of messages[:i] rendered with the
// generation prompt to the end of messages[:i+1] rendered without it.
// Both must be prefixes of the whole conversation's rendering; a template
// for which they are not (one that moves the system message into the last
// user turn, as Mistral v0.3's does) is an error naming the turn. Each
// span and each stretch between spans is encoded on its own, so a reply's
// first token is encoded as generation after the prompt would make it.
func (t *Template) Encode(messages []data.Message, tok data.Tokenizer, maskPrompt bool) (data.Example, error) {
	t = t.pinned()
	var ex data.Example
	full, err := t.Render(messages, false)
	if err != nil {
		return ex, err
	}
	add := func(text string, counts bool) {
		for _, id := range data.EncodeWithSpecials(tok, text) {
			ex.Tokens = append(ex.Tokens, id)
			ex.Train = append(ex.Train, counts)
		}
	}
	if !maskPrompt {
		add(full, true)
		return ex, nil
	}
	eot, err := t.EndOfTurn(tok)
	if err != nil {
		return ex, err
	}
	pos := 0
	for i, m := range messages {
		if m.Role != "assistant" {
			continue
		}
		prompt, err := t.Render(messages[:i], true)
		if err != nil {
			return ex, fmt.Errorf("message %d (assistant) needs the messages before it rendered with the generation prompt: %w", i+1, err)
		}
		through, err := t.Render(messages[:i+1], false)
		if err != nil {
			return ex, fmt.Errorf("message %d (assistant): %w", i+1, err)
		}
		if !strings.HasPrefix(through, prompt) || !strings.HasPrefix(full, through) || len(prompt) < pos {
			return ex, fmt.Errorf("message %d (assistant): the chat template renders the conversation up to this reply differently once more messages follow, so the reply's span cannot be found by rendering "+
				"(Mistral v0.3's template does this with a system message): leave such messages out, or count every token (no prompt masking)", i+1)
		}
		span := through[len(prompt):]
		end := len(span)
		if eot != "" {
			if j := strings.LastIndex(span, eot); j >= 0 {
				end = j + len(eot)
			}
		}
		add(full[pos:len(prompt)], false)
		add(span[:end], true)
		pos = len(prompt) + end
	}
	add(full[pos:], false)
	return ex, nil
}
