package generate

import (
	"context"
	"errors"
)

// NewEngine starts a batched engine over m's network and parameters
// (which m keeps owning: close the engine before m).
func (m *Model) NewEngine(opts EngineOptions) (*Engine, error) {
	return NewEngine(m.Net, m.Params, opts)
}

// Scored is a Result with the numbers an engine reports beside the text:
// each completion token's log-probability and the most likely token's,
// with its id, and, when asked, the prompt's scores.
type Scored struct {
	Result
	Logprobs, TopLogprobs []float32
	Top                   []int32
	Prompt                []PromptScore
}

// EngineRequest is one request of GenerateOn: prompt ids already
// encoded, the sampling options, stop strings applied to the text, and
// the adapter to generate with.
type EngineRequest struct {
	Prompt []int32
	Options
	StopStrings []string
	// ScorePrompt asks for the prompt's scores as well (Scored.Prompt).
	ScorePrompt bool
	// Adapter names an adapter registered on the engine
	// (Engine.SetAdapter); empty for the base model.
	Adapter string
}

// GenerateOn is GenerateTokens on engine e, which batches it with the
// other requests in flight: the model's end tokens and req's stop tokens
// end it, the text streams to onText (which may return ErrStop) with
// req's stop strings applied, and ctx cancels it.
func (m *Model) GenerateOn(ctx context.Context, e *Engine, req EngineRequest, onText func(delta string) error) (Scored, error) {
	prompt := req.Prompt
	streams, err := e.Submit(ctx, Sequence{Prompt: prompt, Options: m.options(req.Options), PromptLogprobs: req.ScorePrompt, Adapter: req.Adapter})
	if err != nil {
		return Scored{}, err
	}
	st := streams[0]
	s := &textStream{tok: m.Tokenizer, stops: req.StopStrings, onText: onText}
	stopped, emitErr := false, error(nil)
	for tok := range st.Tokens {
		if stopped || emitErr != nil {
			continue // the engine ends the row at its next step
		}
		if err := s.push(tok.ID); errors.Is(err, ErrStop) {
			stopped = true
			st.Stop()
		} else if err != nil {
			emitErr = err
			st.Stop()
		}
	}
	c, err := st.Wait()
	if err == nil {
		err = emitErr
	}
	if err != nil {
		return Scored{}, err
	}
	text, err := s.finish()
	if err != nil {
		return Scored{}, err
	}
	n, reason := len(s.ids), c.FinishReason
	if stopped {
		reason, c.StopToken = FinishStop, -1
	}
	return Scored{
		Result: Result{Text: text, Tokens: s.ids, PromptTokens: len(prompt), CompletionTokens: n,
			FinishReason: reason, StopToken: c.StopToken},
		Logprobs: c.Logprobs[:n], Top: c.Top[:n], TopLogprobs: c.TopLogprobs[:n], Prompt: c.Prompt,
	}, nil
}
