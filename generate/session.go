package generate

import (
	"context"

	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/mlx"
)

// Session is a conversation with a model: its messages so far and the
// model's key/value cache of the tokens it has read, so each turn feeds
// the model only what is new (the template's rendering of the reply's
// end and the next user turn). Close it to free the cache.
type Session struct {
	Model    *Model
	Messages []data.Message
	dec      *decoder
}

// NewSession starts a conversation, with a system message when system is
// not empty.
func (m *Model) NewSession(system string) *Session {
	s := &Session{Model: m}
	if system != "" {
		s.Messages = []data.Message{{Role: "system", Content: system}}
	}
	return s
}

// Send adds the user's message, generates the reply (streaming its text to
// onText, when not nil, as Model.Generate does) and adds the reply to the
// conversation. After an error the conversation is as it was.
func (s *Session) Send(ctx context.Context, user string, opts Options, onText func(delta string) error) (Result, error) {
	if err := opts.Validate(); err != nil {
		return Result{}, err
	}
	msgs := append(append([]data.Message(nil), s.Messages...), data.Message{Role: "user", Content: user})
	ids, err := s.Model.ChatPrompt(msgs)
	if err != nil {
		return Result{}, err
	}
	var res Result
	err = mlx.Do(func() error {
		if s.dec == nil {
			s.dec = newDecoder(s.Model.Net, s.Model.Params)
		}
		res, err = s.Model.run(ctx, s.dec, ids, opts, nil, onText)
		return err
	})
	if err != nil {
		return Result{}, err
	}
	s.Messages = append(msgs, data.Message{Role: "assistant", Content: res.Text})
	return res, nil
}

// Cached is how many tokens of the conversation the model's cache holds.
func (s *Session) Cached() int {
	if s.dec == nil {
		return 0
	}
	return len(s.dec.seen)
}

// Close frees the cache; the session can go on, reading the conversation
// again at its next turn.
func (s *Session) Close() {
	if s.dec != nil {
		mlx.Do(func() error { s.dec.free(); return nil })
		s.dec = nil
	}
}
