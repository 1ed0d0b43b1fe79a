package generate

import (
	"context"
	"fmt"
	"slices"

	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/data/chattemplate"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
)

// Model is a language model ready to generate: the network and its
// parameters, the tokenizer, the model's chat template and the tokens
// that end its replies. Its methods may be called from any goroutine;
// generation runs on the MLX thread, one request at a time.
type Model struct {
	Net       *model.Transformer
	Params    []*mlx.Array
	Tokenizer data.Tokenizer
	// Template is the model's own chat template; nil for a model without
	// one, whose chats use the built-in format (data.ChatPrompt).
	Template *chattemplate.Template
	// EndTokens end every generation (EndTokens).
	EndTokens []int32
	close     func()
}

// NewModel bundles a network with what generation needs; close, when not
// nil, releases the parameters (Model.Close calls it once).
func NewModel(net *model.Transformer, params []*mlx.Array, tok data.Tokenizer, tmpl *chattemplate.Template, ends []int32, close func()) *Model {
	return &Model{Net: net, Params: params, Tokenizer: tok, Template: tmpl, EndTokens: ends, close: close}
}

// Close releases the parameters.
func (m *Model) Close() {
	if m.close != nil {
		mlx.Do(func() error { m.close(); return nil })
		m.close = nil
	}
}

// Request is one generation: a raw Prompt, or chat Messages rendered with
// the model's template and its generation prompt.
type Request struct {
	// Prompt is text to continue, special tokens written in it (such as
	// "<|im_start|>") encoded as their ids (data.EncodeWithSpecials); ""
	// starts from the end-of-text token.
	Prompt string
	// PlainPrompt encodes special tokens written in Prompt as plain text.
	PlainPrompt bool
	// Messages, when not empty, are the conversation to reply to; Prompt
	// is then ignored.
	Messages []data.Message
	Options
	// StopStrings end generation where the text first holds one of them;
	// the text returned stops before it.
	StopStrings []string
}

// Result is what a generation made.
type Result struct {
	Text string // the completion's text, without a stop token or string
	// Tokens are the completion's ids (without a stop token).
	Tokens []int32
	// PromptTokens and CompletionTokens count the ids read and made, for
	// a server's usage report.
	PromptTokens, CompletionTokens int
	FinishReason                   FinishReason
	// StopToken is the stop token that ended generation (not counted in
	// CompletionTokens), -1 when none did.
	StopToken int32
}

// ChatPrompt returns the ids of messages rendered for a reply: with the
// model's template and its generation prompt, or, without a template,
// the built-in format (data.ChatPrompt).
func (m *Model) ChatPrompt(messages []data.Message) ([]int32, error) {
	if m.Template == nil {
		return data.ChatPrompt(messages, m.Tokenizer), nil
	}
	return m.Template.Prompt(messages, m.Tokenizer)
}

// prompt returns the ids req starts from.
func (m *Model) prompt(req Request) ([]int32, error) {
	if len(req.Messages) > 0 {
		return m.ChatPrompt(req.Messages)
	}
	return PromptIDs(m.Tokenizer, req.Prompt, req.PlainPrompt), nil
}

// PromptIDs returns the ids a text prompt starts generation from: special
// tokens written in it as their ids, after the tokenizer's prompt prefix
// (Gemma's <bos>; data.EncodePrompt), or as plain text when plain; the
// end-of-text id for a prompt of no tokens.
func PromptIDs(tok data.Tokenizer, text string, plain bool) []int32 {
	var ids []int32
	if plain {
		ids = tok.Encode(text)
	} else {
		ids = data.EncodePrompt(tok, text)
	}
	if len(ids) == 0 {
		ids = []int32{tok.EOT()}
	}
	return ids
}

// options returns opts with the model's end tokens among its stop tokens.
func (m *Model) options(opts Options) Options {
	stops := slices.Clone(m.EndTokens)
	for _, id := range opts.StopTokens {
		if !slices.Contains(stops, id) {
			stops = append(stops, id)
		}
	}
	opts.StopTokens = stops
	return opts
}

// Generate answers req, handing the text to onText (when not nil) as it
// is decoded: the pieces add up to Result.Text. Generation stops at the
// model's end tokens, req's stop tokens and strings, or after MaxTokens
// tokens. ctx cancels between tokens.
func (m *Model) Generate(ctx context.Context, req Request, onText func(delta string) error) (Result, error) {
	if err := req.Options.Validate(); err != nil {
		return Result{}, err
	}
	ids, err := m.prompt(req)
	if err != nil {
		return Result{}, err
	}
	return m.GenerateTokens(ctx, ids, req.Options, req.StopStrings, onText)
}

// GenerateTokens is Generate from prompt ids already encoded (with
// EncodePrompt or ChatPrompt, say, to check their length first): what a
// server's backend calls. onText may return ErrStop to end generation
// with FinishStop, as for a stop string it applies itself.
func (m *Model) GenerateTokens(ctx context.Context, prompt []int32, opts Options, stopStrings []string, onText func(delta string) error) (Result, error) {
	if err := opts.Validate(); err != nil {
		return Result{}, err
	}
	var res Result
	err := mlx.Do(func() error {
		d := newDecoder(m.Net, m.Params)
		defer d.free()
		var err error
		res, err = m.run(ctx, d, prompt, opts, stopStrings, onText)
		return err
	})
	return res, err
}

// EncodePrompt returns the ids of text with special tokens written in it
// as their ids, after the tokenizer's prompt prefix (data.EncodePrompt),
// as a completion prompt is read.
func (m *Model) EncodePrompt(text string) []int32 {
	return data.EncodePrompt(m.Tokenizer, text)
}

// ContextLength is the most tokens the model attends to at once; longer
// texts are generated from a sliding window of this many.
func (m *Model) ContextLength() int { return m.Net.Config.Context }

// run generates from ids with decoder d, streaming the text. Call on the
// MLX thread.
func (m *Model) run(ctx context.Context, d *decoder, ids []int32, opts Options, stops []string, onText func(string) error) (Result, error) {
	if v := m.Net.Config.VocabSize; m.Tokenizer.VocabSize() > v {
		return Result{}, fmt.Errorf("generate: the %s tokenizer has %d ids, the model's vocabulary %d", m.Tokenizer.Name(), m.Tokenizer.VocabSize(), v)
	}
	s := &textStream{tok: m.Tokenizer, stops: stops, onText: onText}
	out, reason, err := d.run(ctx, ids, m.options(opts), s.push)
	if err != nil {
		return Result{}, err
	}
	text, err := s.finish()
	if err != nil {
		return Result{}, err
	}
	return Result{Text: text, Tokens: out, PromptTokens: len(ids), CompletionTokens: len(out), FinishReason: reason, StopToken: d.stopToken}, nil
}
