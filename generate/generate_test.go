package generate

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/data/chattemplate"
	"github.com/posttrainllm/posttrainllm/internal/tokentest"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
)

// chatTokenizer is a byte tokenizer with ChatML's special tokens.
func chatTokenizer() *tokentest.Bytes {
	return tokentest.NewBytes("<|endoftext|>", "<|endoftext|>", "<|im_start|>", "<|im_end|>")
}

// testModel is a fresh one-layer model over tok's ids; a large init std
// makes its distributions peaked, so greedy choices are not decided by
// float rounding.
func testModel(t *testing.T, tok data.Tokenizer, tmpl *chattemplate.Template, ends []int32) *Model {
	t.Helper()
	net, err := model.New(model.Config{VocabSize: tok.VocabSize(), DModel: 32, Layers: 2, Heads: 2, Context: 256, InitStd: 0.3})
	if err != nil {
		t.Fatal(err)
	}
	params, err := net.Init(7)
	if err != nil {
		t.Fatal(err)
	}
	m := NewModel(net, params, tok, tmpl, ends, func() { mlx.Free(params...) })
	t.Cleanup(m.Close)
	return m
}

// smolTemplate is SmolLM2's chat template.
func smolTemplate(t *testing.T) *chattemplate.Template {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("..", "data", "chattemplate", "testdata", "smollm2.jinja"))
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := chattemplate.New(string(src), "<|im_start|>", "<|im_end|>")
	if err != nil {
		t.Fatal(err)
	}
	return tmpl
}

// TestStopTokens: generation ends before the first stop token with
// FinishStop, the completion being what greedy generation without stops
// makes up to it; without stops it makes MaxTokens tokens (FinishLength).
func TestStopTokens(t *testing.T) {
	m := testModel(t, chatTokenizer(), nil, nil)
	prompt := []int32{'H', 'i'}
	all, reason, err := Tokens(context.Background(), m.Net, m.Params, prompt, Options{Sampling: Sampling{MaxTokens: 30}}, nil)
	if err != nil || reason != FinishLength || len(all) != 30 {
		t.Fatalf("no stops: %d tokens, %q, %v; want 30, length", len(all), reason, err)
	}
	stop := all[5]
	first := slices.Index(all, stop)
	out, reason, err := Tokens(context.Background(), m.Net, m.Params, prompt, Options{Sampling: Sampling{MaxTokens: 30}, StopTokens: []int32{stop}}, nil)
	if err != nil || reason != FinishStop || !slices.Equal(out, all[:first]) {
		t.Fatalf("stop at %d: %v, %q, %v; want %v, stop", stop, out, reason, err, all[:first])
	}
	res, err := m.GenerateTokens(context.Background(), prompt, Options{Sampling: Sampling{MaxTokens: 30}, StopTokens: []int32{stop}}, nil, nil)
	if err != nil || res.StopToken != stop || res.CompletionTokens != first || res.PromptTokens != 2 || res.FinishReason != FinishStop {
		t.Fatalf("GenerateTokens with stop %d: %+v, %v", stop, res, err)
	}
	if res, err = m.GenerateTokens(context.Background(), prompt, Options{Sampling: Sampling{MaxTokens: 30}}, nil, nil); err != nil || res.StopToken != -1 || res.FinishReason != FinishLength {
		t.Fatalf("GenerateTokens without stops: %+v, %v", res, err)
	}
	var emitted []int32
	out, reason, err = Tokens(context.Background(), m.Net, m.Params, prompt, Options{Sampling: Sampling{MaxTokens: 30}}, func(id int32) error {
		emitted = append(emitted, id)
		if len(emitted) == 4 {
			return ErrStop
		}
		return nil
	})
	if err != nil || reason != FinishStop || !slices.Equal(out, all[:4]) || !slices.Equal(emitted, out) {
		t.Fatalf("emit stops after 4: %v (emitted %v), %q, %v; want %v", out, emitted, reason, err, all[:4])
	}
	ctx, cancel := context.WithCancel(context.Background())
	_, _, err = Tokens(ctx, m.Net, m.Params, prompt, Options{Sampling: Sampling{MaxTokens: 30}}, func(int32) error { cancel(); return nil })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v, want context.Canceled", err)
	}
}

// TestTopP: a nucleus too small for a second token samples what greedy
// picks; top-p 1 samples as no top-p does; top-p in between samples only
// tokens within the nucleus (a different draw, all valid ids).
func TestTopP(t *testing.T) {
	m := testModel(t, chatTokenizer(), nil, nil)
	prompt := []int32{'a', 'b', 'c'}
	gen := func(o Options) []int32 {
		t.Helper()
		out, _, err := Tokens(context.Background(), m.Net, m.Params, prompt, o, nil)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	greedy := gen(Options{Sampling: Sampling{MaxTokens: 20}})
	if got := gen(Options{Sampling: Sampling{MaxTokens: 20, Temperature: 1, TopP: 1e-6, Seed: 3}}); !slices.Equal(got, greedy) {
		t.Fatalf("top-p 1e-6: %v, greedy %v", got, greedy)
	}
	sampled := gen(Options{Sampling: Sampling{MaxTokens: 20, Temperature: 1.5, Seed: 3}})
	if slices.Equal(sampled, greedy) {
		t.Fatalf("sampling at temperature 1.5 gave the greedy tokens: the comparison shows nothing")
	}
	if got := gen(Options{Sampling: Sampling{MaxTokens: 20, Temperature: 1.5, TopP: 1, Seed: 3}}); !slices.Equal(got, sampled) {
		t.Fatalf("top-p 1: %v, without top-p %v", got, sampled)
	}
	if err := (Options{Sampling: Sampling{MaxTokens: 1, TopP: 1.5}}).Validate(); err == nil || !strings.Contains(err.Error(), "top-p = 1.5") {
		t.Fatalf("top-p 1.5: %v", err)
	}
}

// TestSessionReusesCache: the second turn of a conversation feeds the
// model only the tokens after what its cache holds, and replies exactly
// as a fresh generation from the whole conversation does; the streamed
// text adds up to the reply and the counts are the prompt's and reply's.
func TestSessionReusesCache(t *testing.T) {
	tok := chatTokenizer()
	tmpl := smolTemplate(t)
	ends, err := EndTokens(tok, tmpl)
	if err != nil {
		t.Fatal(err)
	}
	imEnd := tok.SpecialTokens()["<|im_end|>"]
	if !slices.Contains(ends, imEnd) || !slices.Contains(ends, tok.EOT()) {
		t.Fatalf("end tokens %v, want <|im_end|> (%d) and <|endoftext|> (%d)", ends, imEnd, tok.EOT())
	}
	m := testModel(t, tok, tmpl, ends)
	opts := Options{Sampling: Sampling{MaxTokens: 12}}
	s := m.NewSession("Be brief.")
	defer s.Close()
	var streamed strings.Builder
	r1, err := s.Send(context.Background(), "Hi", opts, func(d string) error { streamed.WriteString(d); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if streamed.String() != r1.Text || r1.CompletionTokens != len(r1.Tokens) || r1.CompletionTokens == 0 {
		t.Fatalf("turn 1: streamed %q, text %q, %d tokens", streamed.String(), r1.Text, r1.CompletionTokens)
	}
	fedBefore := s.dec.fed
	r2, err := s.Send(context.Background(), "And more?", opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	fed := s.dec.fed - fedBefore
	if fed >= r2.PromptTokens {
		t.Fatalf("turn 2 fed %d tokens for a %d-token prompt: the cache was not reused", fed, r2.PromptTokens)
	}
	if len(s.Messages) != 5 || s.Messages[4].Content != r2.Text || s.Messages[2].Content != r1.Text {
		t.Fatalf("conversation %+v", s.Messages)
	}
	fresh, err := m.Generate(context.Background(), Request{Messages: s.Messages[:4], Options: opts}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(fresh.Tokens, r2.Tokens) || fresh.PromptTokens != r2.PromptTokens || fresh.FinishReason != r2.FinishReason {
		t.Fatalf("turn 2 from the cache: %v (%d prompt tokens, %s); from scratch: %v (%d, %s)",
			r2.Tokens, r2.PromptTokens, r2.FinishReason, fresh.Tokens, fresh.PromptTokens, fresh.FinishReason)
	}
	want, err := m.ChatPrompt(s.Messages[:4])
	if err != nil || fresh.PromptTokens != len(want) {
		t.Fatalf("prompt tokens %d, the rendered prompt has %d (%v)", fresh.PromptTokens, len(want), err)
	}
}

// TestEndTokensFromFiles reads eos_token_id as an id (config.json) and a
// list (generation_config.json), and refuses an id outside the
// vocabulary.
func TestEndTokensFromFiles(t *testing.T) {
	tok := chatTokenizer()
	dir := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("config.json", `{"eos_token_id": 258}`)
	write("generation_config.json", `{"eos_token_id": [10, 258, 11]}`)
	ends, err := EndTokens(tok, nil, dir)
	if err != nil || !slices.Equal(ends, []int32{256, 258, 10, 11}) {
		t.Fatalf("end tokens %v, %v; want [256 258 10 11]", ends, err)
	}
	write("config.json", `{"eos_token_id": 9999}`)
	if _, err := EndTokens(tok, nil, dir); err == nil || !strings.Contains(err.Error(), "9999") {
		t.Fatalf("id 9999: %v", err)
	}
	write("config.json", `{"eos_token_id": "x"}`)
	if _, err := EndTokens(tok, nil, dir); err == nil || !strings.Contains(err.Error(), "eos_token_id") {
		t.Fatalf("a string: %v", err)
	}
}

// A model without a template chats in the built-in format and stops at
// its end-of-text token; a raw prompt has its special tokens read as ids
// unless PlainPrompt, and "" starts from the end-of-text token.
func TestBuiltInFormatAndPrompts(t *testing.T) {
	tok := chatTokenizer()
	m := testModel(t, tok, nil, []int32{tok.EOT()})
	msgs := []data.Message{{Role: "user", Content: "Hi"}}
	ids, err := m.ChatPrompt(msgs)
	if err != nil || !slices.Equal(ids, data.ChatPrompt(msgs, tok)) {
		t.Fatalf("chat prompt %v, %v; want data.ChatPrompt's", ids, err)
	}
	res, err := m.Generate(context.Background(), Request{Messages: msgs, Options: Options{Sampling: Sampling{MaxTokens: 8}}}, nil)
	if err != nil || res.PromptTokens != len(ids) {
		t.Fatalf("%+v, %v", res, err)
	}
	for _, tc := range []struct {
		req  Request
		want []int32
	}{
		{Request{Prompt: "<|im_start|>x"}, []int32{257, 'x'}},
		{Request{Prompt: "<|im_start|>x", PlainPrompt: true}, tok.Encode("<|im_start|>x")},
		{Request{}, []int32{tok.EOT()}},
	} {
		got, err := m.prompt(tc.req)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Fatalf("%+v: prompt %v, %v; want %v", tc.req, got, err, tc.want)
		}
	}
}

func TestTimingCountsPromptAndGeneration(t *testing.T) {
	m := testModel(t, chatTokenizer(), nil, nil)
	var timing Timing
	prompt := []int32{'a', 'b', 'c', 'd'}
	out, _, err := Tokens(context.Background(), m.Net, m.Params, prompt, Options{Sampling: Sampling{MaxTokens: 9}, Timing: &timing}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if timing.PromptTokens != len(prompt) || timing.Generated != len(out) || len(out) != 9 || timing.Prompt <= 0 || timing.Generation <= 0 {
		t.Fatalf("timing %+v for a %d-token prompt and %d tokens", timing, len(prompt), len(out))
	}
	if r := timing.GenerationRate(); !(r > 0) || math.IsInf(r, 0) {
		t.Fatalf("generation rate %v", r)
	}
}
