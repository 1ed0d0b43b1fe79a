package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// answer writes one generation's response: server-sent events as text
// arrives when the request streams, one JSON object at the end otherwise.
type answer struct {
	w       http.ResponseWriter
	flusher http.Flusher
	j       job
	id      string
	created int64
	prompt  int
	stop    stopper
	text    strings.Builder // the whole text, when not streaming
	started bool            // the stream's headers and first chunk are out
	broken  bool            // writing to the client failed
	// tokenText is the backend's, for logprobs.
	tokenText func(id int32) string
}

// newAnswer starts the answer of job j to w (its model field the model
// the request picked); prompt counts its tokens.
func newAnswer(w http.ResponseWriter, j job, prompt int) *answer {
	prefix := "cmpl-"
	if j.chat {
		prefix = "chatcmpl-"
	}
	a := &answer{w: w, j: j, id: newID(prefix), created: time.Now().Unix(), prompt: prompt, stop: stopper{stops: j.stop}}
	a.flusher, _ = w.(http.Flusher)
	return a
}

// emit is the Backend's callback: it applies the stop strings and sends or
// keeps what they release. It returns false to stop generating.
func (a *answer) emit(piece string) bool {
	release, stopped := a.stop.add(piece)
	a.send(release)
	return !stopped && !a.broken
}

// send passes released text on.
func (a *answer) send(text string) {
	if !a.j.stream {
		a.text.WriteString(text)
		return
	}
	if text == "" && a.started {
		return
	}
	a.event(a.chunk(text, nil))
}

// finish ends the answer after Generate returned gen and err.
func (a *answer) finish(gen Generation, err error) {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || a.broken {
		return // the client left
	}
	if err != nil {
		e := &apiError{status: http.StatusInternalServerError, Type: serverError, Message: fmt.Sprintf("generation failed: %v", err)}
		if a.started {
			a.event(map[string]*apiError{"error": e})
			return
		}
		e.write(a.w)
		return
	}
	a.send(a.stop.flush())
	if a.stop.done {
		gen.Finish = FinishStop
	}
	usage := map[string]int{"prompt_tokens": a.prompt, "completion_tokens": gen.Tokens, "total_tokens": a.prompt + gen.Tokens}
	if !a.j.stream {
		body := a.envelope(a.j.chat, "")
		choice := map[string]any{"index": 0, "finish_reason": gen.Finish}
		if a.j.chat {
			choice["message"] = map[string]any{"role": "assistant", "content": a.text.String()}
			choice["logprobs"] = nil
		} else {
			choice["text"] = a.text.String()
			choice["logprobs"] = nil
			if a.j.echo {
				choice["text"] = a.j.prompt + a.text.String()
			}
			if a.j.params.Logprobs {
				choice["logprobs"] = a.logprobs(gen)
			}
		}
		body["choices"] = []any{choice}
		body["usage"] = usage
		writeJSON(a.w, http.StatusOK, body)
		return
	}
	finish := gen.Finish
	a.event(a.chunk("", &finish))
	if a.j.streamUsage {
		body := a.envelope(a.j.chat, ".chunk")
		body["choices"] = []any{}
		body["usage"] = usage
		a.event(body)
	}
	a.write("data: [DONE]\n\n")
}

// logprobs is a completion's logprobs object as the legacy completions
// API writes it: the echoed prompt's tokens (the first without a
// log-probability) and the generated ones, each with its text, its
// log-probability, the most likely token's as {text: log-probability} and
// its offset in the choice's text.
func (a *answer) logprobs(gen Generation) map[string]any {
	all := gen.Logprobs
	if a.j.echo {
		all = append(append([]TokenLogprob(nil), gen.Prompt...), gen.Logprobs...)
	}
	tokens, offsets := make([]string, len(all)), make([]int, len(all))
	lps, tops := make([]any, len(all)), make([]any, len(all))
	offset := 0
	for i, t := range all {
		tokens[i], offsets[i] = a.tokenText(t.ID), offset
		offset += len(tokens[i])
		if t.Scored {
			lps[i] = t.Logprob
			tops[i] = map[string]float64{a.tokenText(t.Top): t.TopLogprob}
		}
	}
	return map[string]any{"tokens": tokens, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offsets}
}

// envelope is the fields every response and chunk has.
func (a *answer) envelope(chat bool, chunk string) map[string]any {
	object := "text_completion"
	if chat {
		object = "chat.completion" + chunk
	}
	return map[string]any{"id": a.id, "object": object, "created": a.created, "model": a.j.model}
}

// chunk is a streamed piece of text, or the last chunk when finish is set.
func (a *answer) chunk(text string, finish *string) map[string]any {
	body := a.envelope(a.j.chat, ".chunk")
	choice := map[string]any{"index": 0, "finish_reason": finish, "logprobs": nil}
	if a.j.chat {
		delta := map[string]any{}
		if !a.started {
			delta["role"] = "assistant"
		}
		if finish == nil {
			delta["content"] = text
		}
		choice["delta"] = delta
	} else {
		choice["text"] = text
	}
	body["choices"] = []any{choice}
	return body
}

// event sends v as one server-sent event, with the stream's headers first.
func (a *answer) event(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		a.broken = true
		return
	}
	a.write("data: " + string(b) + "\n\n")
}

// write sends raw stream text and flushes it to the client.
func (a *answer) write(s string) {
	if a.broken {
		return
	}
	if !a.started {
		h := a.w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		h.Set("Connection", "keep-alive")
		a.w.WriteHeader(http.StatusOK)
		a.started = true
	}
	if _, err := a.w.Write([]byte(s)); err != nil {
		a.broken = true
		return
	}
	if a.flusher != nil {
		a.flusher.Flush()
	}
}
