package generate

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/data/hftokenizer"
	"github.com/posttrainllm/posttrainllm/internal/realmodel"
)

// A three-turn greedy conversation with the real SmolLM2-135M-Instruct
// gives the same replies whether the session keeps the model's cache
// between turns or every reply rereads the whole conversation, and the
// session reads fewer tokens: each turn only what follows its cache.
func TestRealModelSessionMatchesFresh(t *testing.T) {
	dir := realmodel.Folder(t)
	m, err := OpenFolder(dir, "", func(dir, _ string, _ int) (data.Tokenizer, error) {
		return hftokenizer.Load(filepath.Join(dir, "tokenizer.json"))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	opts := Options{Sampling: Sampling{MaxTokens: 24}}
	s := m.NewSession("")
	defer s.Close()
	var msgs []data.Message
	freshRead := 0
	for _, u := range []string{"What is the capital of France?", "And what is it famous for?", "Name one museum there."} {
		r, err := s.Send(context.Background(), u, opts, nil)
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, data.Message{Role: "user", Content: u})
		f, err := m.Generate(context.Background(), Request{Messages: msgs, Options: opts}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(r.Tokens, f.Tokens) || r.Text != f.Text {
			t.Fatalf("turn %q: the session replied %q, a fresh generation %q", u, r.Text, f.Text)
		}
		msgs = append(msgs, data.Message{Role: "assistant", Content: f.Text})
		freshRead += f.PromptTokens + f.CompletionTokens - 1
	}
	if s.dec.fed >= freshRead {
		t.Fatalf("the session read %d tokens, rereading reads %d", s.dec.fed, freshRead)
	}
	t.Logf("tokens read over 3 turns: %d with the session's cache, %d rereading", s.dec.fed, freshRead)
}
