package serve

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"
)

// Options configure a Server. Zero values take the defaults.
type Options struct {
	// MaxBodyBytes is the largest request body answered; larger ones get
	// 413. Default 4 MiB.
	MaxBodyBytes int64
	// MaxQueue is how many requests may wait for the model while the
	// backend's batch is full; more get 503. Default 64.
	MaxQueue int
	// CompletionMaxTokens is /v1/completions' max_tokens when a request
	// gives none (the OpenAI API's default is 16). Chat completions
	// without one may fill the rest of the context.
	CompletionMaxTokens int
}

// withDefaults fills the zero fields of o.
func (o Options) withDefaults() Options {
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = 4 << 20
	}
	if o.MaxQueue <= 0 {
		o.MaxQueue = 64
	}
	if o.CompletionMaxTokens <= 0 {
		o.CompletionMaxTokens = 16
	}
	return o
}

// Server is the OpenAI-compatible HTTP handler over one Backend. Up to
// the backend's Concurrency generations run at once (it batches them);
// the others wait their turn in arrival order, at most MaxQueue of them
// (a request whose client leaves while it waits gives up its place, and
// one that leaves while it generates stops its generation and frees its
// row).
type Server struct {
	b       Backend
	opts    Options
	slot    chan struct{} // holds a token per generation running
	waiting atomic.Int64
	created int64
}

// New returns the server of b.
func New(b Backend, opts Options) *Server {
	return &Server{b: b, opts: opts.withDefaults(), slot: make(chan struct{}, max(1, b.Concurrency())), created: time.Now().Unix()}
}

// ServeHTTP routes GET /v1/models, POST /v1/completions and POST
// /v1/chat/completions; anything else is answered in the API's error
// shape (404 or 405).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	routes := map[string]struct {
		method string
		handle func(http.ResponseWriter, *http.Request)
	}{
		"/v1/models":           {http.MethodGet, s.models},
		"/v1/completions":      {http.MethodPost, s.completions},
		"/v1/chat/completions": {http.MethodPost, s.chatCompletions},
	}
	route, ok := routes[r.URL.Path]
	if !ok {
		(&apiError{status: http.StatusNotFound, Type: invalidRequest,
			Message: fmt.Sprintf("no route %s %s: this server answers GET /v1/models, POST /v1/completions and POST /v1/chat/completions", r.Method, r.URL.Path)}).write(w)
		return
	}
	if r.Method != route.method {
		w.Header().Set("Allow", route.method)
		(&apiError{status: http.StatusMethodNotAllowed, Type: invalidRequest,
			Message: fmt.Sprintf("%s %s is not answered: want %s", r.Method, r.URL.Path, route.method)}).write(w)
		return
	}
	route.handle(w, r)
}

// models answers GET /v1/models: the model served and the adapters
// served beside it (AdapterBackend), each adapter naming the base as its
// parent.
func (s *Server) models(w http.ResponseWriter, _ *http.Request) {
	list := []map[string]any{{
		"id": s.b.Model(), "object": "model", "created": s.created, "owned_by": "posttrainllm",
	}}
	if ab, ok := s.b.(AdapterBackend); ok {
		for _, id := range ab.Adapters() {
			list = append(list, map[string]any{
				"id": id, "object": "model", "created": s.created, "owned_by": "posttrainllm", "parent": s.b.Model(),
			})
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": list})
}

// completions answers POST /v1/completions.
func (s *Server) completions(w http.ResponseWriter, r *http.Request) {
	var req completionRequest
	if err := decode(w, r, s.opts.MaxBodyBytes, &req); err != nil {
		err.write(w)
		return
	}
	var j job
	if err := req.check(s.b, &j, s.opts.CompletionMaxTokens); err != nil {
		err.write(w)
		return
	}
	prompt, ids, apiErr := parsePrompt(req.Prompt, s.b.VocabSize())
	if apiErr != nil {
		apiErr.write(w)
		return
	}
	j.prompt, j.promptIDs = prompt, ids
	if ids == nil {
		var err error
		if ids, err = s.b.EncodePrompt(prompt); err != nil {
			badRequest("prompt", "%v", err).write(w)
			return
		}
	} else {
		j.prompt = s.b.DecodeText(ids)
	}
	s.run(w, r, j, ids)
}

// chatCompletions answers POST /v1/chat/completions.
func (s *Server) chatCompletions(w http.ResponseWriter, r *http.Request) {
	var req chatRequest
	if err := decode(w, r, s.opts.MaxBodyBytes, &req); err != nil {
		err.write(w)
		return
	}
	j := job{chat: true}
	if err := req.check(s.b, &j, 0); err != nil {
		err.write(w)
		return
	}
	msgs, apiErr := parseMessages(req.Messages)
	if apiErr != nil {
		apiErr.write(w)
		return
	}
	j.chat, j.messages = true, msgs
	ids, err := s.b.EncodeChat(msgs)
	if err != nil {
		badRequest("messages", "%v", err).write(w)
		return
	}
	s.run(w, r, j, ids)
}

// run checks the prompt's length against the context, waits for the
// model, generates and answers, streamed or whole.
func (s *Server) run(w http.ResponseWriter, r *http.Request, j job, prompt []int32) {
	ctxLen := s.b.ContextLength()
	switch {
	case len(prompt) == 0:
		badRequest(promptParam(j), "the prompt encodes to no tokens, want at least one").write(w)
		return
	case len(prompt) >= ctxLen:
		badRequest(promptParam(j), "the prompt is %d tokens, want fewer than the model's context of %d", len(prompt), ctxLen).write(w)
		return
	case j.maxGiven && len(prompt)+j.params.MaxTokens > ctxLen:
		badRequest("max_tokens", "the prompt's %d tokens and max_tokens = %d exceed the model's context of %d tokens: want max_tokens at most %d",
			len(prompt), j.params.MaxTokens, ctxLen, ctxLen-len(prompt)).write(w)
		return
	case !j.maxGiven:
		room := ctxLen - len(prompt)
		if j.params.MaxTokens == 0 || j.params.MaxTokens > room {
			j.params.MaxTokens = room
		}
	}
	if err := s.acquire(r.Context()); err != nil {
		if errors.Is(err, errBusy) {
			(&apiError{status: http.StatusServiceUnavailable, Type: serverError, Message: err.Error()}).write(w)
		}
		return // the client left while waiting: nobody to answer
	}
	defer func() { <-s.slot }()
	a := newAnswer(w, j, len(prompt))
	a.tokenText = s.b.TokenText
	gen, err := s.b.Generate(r.Context(), prompt, j.params, a.emit)
	a.finish(gen, err)
}

// errBusy is acquire's error when the queue is full.
var errBusy = errors.New("server busy: too many requests are waiting for the model; retry later")

// acquire waits for a generation slot, in arrival order, until ctx is
// done.
func (s *Server) acquire(ctx context.Context) error {
	if s.waiting.Add(1) > int64(s.opts.MaxQueue+cap(s.slot)) {
		s.waiting.Add(-1)
		return errBusy
	}
	defer s.waiting.Add(-1)
	select {
	case s.slot <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// promptParam names the request field the prompt came from.
func promptParam(j job) string {
	if j.chat {
		return "messages"
	}
	return "prompt"
}

// newID returns a fresh response id with prefix.
func newID(prefix string) string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}
