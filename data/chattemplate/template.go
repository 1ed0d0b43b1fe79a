// Package chattemplate renders a model's own chat template: the Jinja
// template a Hugging Face tokenizer_config.json (or chat_template.jinja)
// carries, rendered as transformers' apply_chat_template renders it, so a
// fine-tune or a chat sees the exact text the model was trained on. It
// also finds the spans of assistant turns in a rendered conversation, by
// rendering (Encode), and the template's end-of-turn token (EndOfTurn).
//
// Rendering uses github.com/ardanlabs/jinja, with whitespace control
// (trim_blocks and lstrip_blocks, Hugging Face's settings) applied as
// jinja2 applies it (whitespace.go), and the raise_exception and
// strftime_now globals transformers defines. The package's tests compare
// it byte for byte with Python's jinja2 under those settings on the
// SmolLM2, Llama 3.2, Qwen2.5 and Mistral v0.3 templates.
package chattemplate

import (
	"errors"
	"fmt"
	"time"

	"github.com/ardanlabs/jinja"

	"github.com/posttrainllm/posttrainllm/data"
)

// ErrNoTemplate is returned by Load for a folder whose tokenizer files
// carry no chat template: such a model has no chat format of its own.
var ErrNoTemplate = errors.New("no chat template")

// Template is a compiled chat template with the special-token strings it
// is rendered with. It is safe for concurrent use.
type Template struct {
	// Source is the Jinja text.
	Source string
	// BOS and EOS are what the template sees as bos_token and eos_token
	// (tokenizer_config.json's), "" where the tokenizer has none.
	BOS, EOS string
	// Now is the clock strftime_now reads; nil for time.Now. Tests fix it
	// so that templates that print today's date (Llama 3) render
	// reproducibly.
	Now func() time.Time
	tpl *jinja.Template
}

// New compiles source, a Jinja chat template, rendered with bos and eos as
// bos_token and eos_token.
func New(source, bos, eos string) (*Template, error) {
	norm, err := normalize(source)
	if err != nil {
		return nil, err
	}
	tpl, err := jinja.Compile(norm)
	if err != nil {
		return nil, fmt.Errorf("chat template: %w", err)
	}
	return &Template{Source: source, BOS: bos, EOS: eos, tpl: tpl}, nil
}

// Render renders messages as transformers' apply_chat_template(messages,
// tokenize=False, add_generation_prompt=addGenerationPrompt) does: each
// message is a mapping with "role" and "content", and the template sees
// bos_token, eos_token and add_generation_prompt. A template that calls
// raise_exception (such as one that refuses a system message or
// non-alternating roles) returns that message as an error.
func (t *Template) Render(messages []data.Message, addGenerationPrompt bool) (string, error) {
	msgs := make([]jinja.Value, len(messages))
	for i, m := range messages {
		d := jinja.NewDict()
		d.AsDict().Set("role", jinja.NewString(m.Role))
		d.AsDict().Set("content", jinja.NewString(m.Content))
		msgs[i] = d
	}
	now := t.Now
	if now == nil {
		now = time.Now
	}
	vals := map[string]jinja.Value{
		"messages":              jinja.NewList(msgs),
		"add_generation_prompt": jinja.NewBool(addGenerationPrompt),
		"bos_token":             jinja.NewString(t.BOS),
		"eos_token":             jinja.NewString(t.EOS),
		"strftime_now": jinja.NewCallable("strftime_now", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
			if len(args) != 1 || !args[0].IsString() {
				return jinja.Undefined(), fmt.Errorf("strftime_now takes one format string, got %d arguments", len(args))
			}
			return jinja.NewString(strftime(now(), args[0].AsString())), nil
		}),
	}
	out, err := t.tpl.RenderValues(vals)
	if err != nil {
		return "", fmt.Errorf("chat template: %w", err)
	}
	return out, nil
}
