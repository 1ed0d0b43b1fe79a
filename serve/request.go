package serve

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strings"

	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/generate"
)

// request holds the fields /v1/completions and /v1/chat/completions share.
// Pointers tell a missing field from a zero one.
type request struct {
	Model               *string          `json:"model"`
	MaxTokens           *int             `json:"max_tokens"`
	MaxCompletionTokens *int             `json:"max_completion_tokens"`
	Temperature         *float64         `json:"temperature"`
	TopP                *float64         `json:"top_p"`
	Seed                *int64           `json:"seed"`
	N                   *int             `json:"n"`
	Stop                *json.RawMessage `json:"stop"`
	Stream              bool             `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	Logprobs *json.RawMessage `json:"logprobs"`
	Echo     bool             `json:"echo"`
	Tools    *json.RawMessage `json:"tools"`
}

// completionRequest is a POST /v1/completions body.
type completionRequest struct {
	request
	Prompt *json.RawMessage `json:"prompt"`
}

// chatRequest is a POST /v1/chat/completions body.
type chatRequest struct {
	request
	Messages *[]chatMessage `json:"messages"`
}

// chatMessage is one message of a chat request: its content is a string or
// a list of parts, of which the text parts are joined.
type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// job is a checked request: what to encode and how to generate.
type job struct {
	model       string
	prompt      string         // completions
	promptIDs   []int32        // completions whose prompt came as token ids
	messages    []data.Message // chat
	chat        bool
	params      Params
	maxGiven    bool
	stop        []string
	stream      bool
	streamUsage bool
	echo        bool
}

// decode reads a JSON body of at most limit bytes into v: an apiError for
// a body too large (413), malformed JSON or a field of the wrong type (400).
func decode(w http.ResponseWriter, r *http.Request, limit int64, v any) *apiError {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return &apiError{status: http.StatusRequestEntityTooLarge, Type: invalidRequest,
			Message: fmt.Sprintf("request body is larger than %d bytes", limit)}
	}
	if err != nil {
		return badRequest("", "reading the request body: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(v); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			field := strings.TrimPrefix(typeErr.Field, "request.") // the shared fields' embedded struct
			return badRequest(field, "%s is a JSON %s, want %s", fieldName(field), typeErr.Value, jsonKind(typeErr.Type.String()))
		}
		return badRequest("", "the request body is not a JSON object: %v", err)
	}
	if dec.More() {
		return badRequest("", "the request body holds more than one JSON value")
	}
	return nil
}

// fieldName names a JSON field for messages: the body itself when empty.
func fieldName(f string) string {
	if f == "" {
		return "the request body"
	}
	return "'" + f + "'"
}

// jsonKind says which JSON value a Go type wants, for type errors.
func jsonKind(goType string) string {
	goType = strings.TrimLeft(goType, "*[]")
	switch {
	case goType == "string":
		return "a string"
	case goType == "bool":
		return "a boolean"
	case strings.HasPrefix(goType, "int"):
		return "an integer"
	case strings.HasPrefix(goType, "float"):
		return "a number"
	default:
		return "an object"
	}
}

// check validates the shared fields against backend b and fills j.
func (req *request) check(b Backend, j *job, defaultMax int) *apiError {
	adapter, apiErr := pickModel(b, req.Model)
	if apiErr != nil {
		return apiErr
	}
	j.model = b.Model()
	if adapter != "" {
		j.model = adapter
	}
	if req.N != nil && *req.N != 1 {
		return badRequest("n", "n = %d is not supported: want 1", *req.N)
	}
	if req.Logprobs != nil && string(*req.Logprobs) != "null" && string(*req.Logprobs) != "false" {
		var n int
		if j.chat || json.Unmarshal(*req.Logprobs, &n) != nil {
			return badRequest("logprobs", "logprobs = %s: this server reports them on /v1/completions as an integer, 0 or 1", *req.Logprobs)
		}
		if n < 0 || n > 1 {
			return badRequest("logprobs", "logprobs = %d: this server reports the most likely token alone, want 0 or 1", n)
		}
		if req.Stream {
			return badRequest("logprobs", "logprobs are answered without streaming: want stream false")
		}
		j.params.Logprobs = n > 0 || req.Echo
	}
	if req.Echo {
		if j.chat || req.Stream {
			return badRequest("echo", "echo is answered on /v1/completions without streaming")
		}
		j.echo = true
	}
	if req.Tools != nil && string(*req.Tools) != "null" {
		return badRequest("tools", "tools are not supported")
	}
	j.params = Params{Sampling: generate.Sampling{MaxTokens: defaultMax, Temperature: 1, TopP: 1}, Logprobs: j.params.Logprobs, Echo: j.echo, Adapter: adapter}
	max, name := req.MaxTokens, "max_tokens"
	if max == nil {
		max, name = req.MaxCompletionTokens, "max_completion_tokens"
	}
	if max != nil {
		if *max <= 0 {
			return badRequest(name, "%s = %d, want at least 1", name, *max)
		}
		j.params.MaxTokens, j.maxGiven = *max, true
	}
	if t := req.Temperature; t != nil {
		if math.IsNaN(*t) || *t < 0 || *t > 2 {
			return badRequest("temperature", "temperature = %g, want a number from 0 to 2", *t)
		}
		j.params.Temperature = *t
	}
	if p := req.TopP; p != nil {
		if math.IsNaN(*p) || *p <= 0 || *p > 1 {
			return badRequest("top_p", "top_p = %g, want a number above 0 and at most 1", *p)
		}
		j.params.TopP = *p
	}
	if req.Seed != nil {
		j.params.Seed, j.params.HasSeed = uint64(*req.Seed), true
	}
	stop, err := parseStop(req.Stop)
	if err != nil {
		return err
	}
	j.stop = stop
	j.stream = req.Stream
	if req.StreamOptions != nil {
		if !req.Stream {
			return badRequest("stream_options", "stream_options is only allowed when stream is true")
		}
		j.streamUsage = req.StreamOptions.IncludeUsage
	}
	return nil
}

// pickModel resolves a request's "model" against backend b: the base
// model's id, or none, is the base (""); an adapter's id (AdapterBackend)
// is that adapter; any other id is answered 404 model_not_found, as the
// OpenAI API answers a model it does not have.
func pickModel(b Backend, model *string) (string, *apiError) {
	if model == nil || *model == "" || *model == b.Model() {
		return "", nil
	}
	served := []string{b.Model()}
	if ab, ok := b.(AdapterBackend); ok {
		if slices.Contains(ab.Adapters(), *model) {
			return *model, nil
		}
		served = append(served, ab.Adapters()...)
	}
	return "", &apiError{status: http.StatusNotFound, Type: invalidRequest, Param: "model", Code: "model_not_found",
		Message: fmt.Sprintf("model %q does not exist: this server serves %s", *model, quoteList(served))}
}

// quoteList is ids quoted and joined for a message.
func quoteList(ids []string) string {
	q := make([]string, len(ids))
	for i, id := range ids {
		q[i] = fmt.Sprintf("%q", id)
	}
	return strings.Join(q, ", ")
}

// maxStops is how many stop strings a request may give, as OpenAI allows.
const maxStops = 4

// parseStop reads "stop": null, a string, or a list of up to four strings.
func parseStop(raw *json.RawMessage) ([]string, *apiError) {
	if raw == nil || string(*raw) == "null" {
		return nil, nil
	}
	var one string
	if json.Unmarshal(*raw, &one) == nil {
		if one == "" {
			return nil, badRequest("stop", "stop is an empty string, want a non-empty string")
		}
		return []string{one}, nil
	}
	var list []string
	if err := json.Unmarshal(*raw, &list); err != nil {
		return nil, badRequest("stop", "stop is %s, want a string or a list of strings", *raw)
	}
	if len(list) > maxStops {
		return nil, badRequest("stop", "stop has %d strings, want at most %d", len(list), maxStops)
	}
	for i, s := range list {
		if s == "" {
			return nil, badRequest("stop", "stop[%d] is an empty string, want a non-empty string", i)
		}
	}
	return list, nil
}

// parsePrompt reads a completion's "prompt": a string, a list of one
// string (what the openai client sends for a single prompt in a list), or
// token ids, a list or a list of one list (what evaluation harnesses
// send: taken as given, nothing added). ids is nil for a text prompt.
func parsePrompt(raw *json.RawMessage, vocab int) (string, []int32, *apiError) {
	if raw == nil {
		return "", nil, badRequest("prompt", "'prompt' is required")
	}
	var s string
	if json.Unmarshal(*raw, &s) == nil {
		return s, nil, nil
	}
	var list []string
	if json.Unmarshal(*raw, &list) == nil {
		if len(list) != 1 {
			return "", nil, badRequest("prompt", "prompt is a list of %d strings, want one prompt per request", len(list))
		}
		return list[0], nil, nil
	}
	var ids []int32
	if json.Unmarshal(*raw, &ids) != nil {
		var lists [][]int32
		if json.Unmarshal(*raw, &lists) != nil {
			return "", nil, badRequest("prompt", "prompt is %.80s, want a string or a list of token ids", *raw)
		}
		if len(lists) != 1 {
			return "", nil, badRequest("prompt", "prompt is %d lists of token ids, want one prompt per request", len(lists))
		}
		ids = lists[0]
	}
	if len(ids) == 0 {
		return "", nil, badRequest("prompt", "prompt is an empty list of token ids, want at least one")
	}
	for i, id := range ids {
		if id < 0 || int(id) >= vocab {
			return "", nil, badRequest("prompt", "prompt token %d is id %d, want an id in [0, %d)", i, id, vocab)
		}
	}
	return "", ids, nil
}

// parseMessages reads a chat request's messages: roles system, user and
// assistant, content a string or a list of text parts.
func parseMessages(msgs *[]chatMessage) ([]data.Message, *apiError) {
	if msgs == nil || len(*msgs) == 0 {
		return nil, badRequest("messages", "'messages' is required: want a non-empty list of messages")
	}
	out := make([]data.Message, len(*msgs))
	for i, m := range *msgs {
		param := fmt.Sprintf("messages[%d]", i)
		switch m.Role {
		case "system", "user", "assistant":
		case "developer":
			m.Role = "system"
		default:
			return nil, badRequest(param+".role", "%s.role = %q, want system, user or assistant", param, m.Role)
		}
		text, err := messageText(m.Content)
		if err != nil {
			return nil, badRequest(param+".content", "%s.content %s", param, err)
		}
		out[i] = data.Message{Role: m.Role, Content: text}
	}
	return out, nil
}

// messageText is a message content's text: the string, or its text parts
// joined.
func messageText(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", fmt.Errorf("is missing, want a string")
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var parts []struct {
		Type string  `json:"type"`
		Text *string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", fmt.Errorf("is %s, want a string or a list of text parts", raw)
	}
	var b strings.Builder
	for k, p := range parts {
		if p.Type != "text" || p.Text == nil {
			return "", fmt.Errorf("part %d has type %q, want only text parts", k, p.Type)
		}
		b.WriteString(*p.Text)
	}
	return b.String(), nil
}
