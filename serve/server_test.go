package serve

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/posttrainllm/posttrainllm/data"
)

// scripted is a Backend that answers every prompt with the same pieces of
// text, one per token, and checks that generations never overlap.
type scripted struct {
	pieces  []string
	end     bool // an end token follows the pieces
	context int
	batch   int // Concurrency; 0 for 1
	running atomic.Int32
	most    atomic.Int32 // the most generations that ran at once
	overlap atomic.Bool
	started chan struct{} // receives when a generation starts, if set
	release chan struct{} // a generation waits for it before each piece, if set
}

func (s *scripted) Model() string             { return "tiny" }
func (s *scripted) Concurrency() int          { return max(1, s.batch) }
func (s *scripted) VocabSize() int            { return 256 }
func (s *scripted) TokenText(id int32) string { return string(rune(id)) }
func (s *scripted) DecodeText(ids []int32) string {
	var b strings.Builder
	for _, id := range ids {
		b.WriteRune(rune(id))
	}
	return b.String()
}
func (s *scripted) ContextLength() int { return s.context }
func (s *scripted) EncodePrompt(text string) ([]int32, error) {
	ids := make([]int32, len(text))
	for i := range text {
		ids[i] = int32(text[i])
	}
	return ids, nil
}
func (s *scripted) EncodeChat(msgs []data.Message) ([]int32, error) {
	var b strings.Builder
	for _, m := range msgs {
		fmt.Fprintf(&b, "<%s>%s", m.Role, m.Content)
	}
	return s.EncodePrompt(b.String() + "<assistant>")
}
func (s *scripted) Generate(ctx context.Context, prompt []int32, p Params, emit func(string) bool) (Generation, error) {
	n := s.running.Add(1)
	if n > int32(s.Concurrency()) {
		s.overlap.Store(true)
	}
	for m := s.most.Load(); n > m && !s.most.CompareAndSwap(m, n); m = s.most.Load() {
	}
	defer s.running.Add(-1)
	if s.started != nil {
		s.started <- struct{}{}
	}
	var g Generation
	for _, piece := range s.pieces {
		if s.release != nil {
			select {
			case <-s.release:
			case <-ctx.Done():
				return g, ctx.Err()
			}
		}
		if err := ctx.Err(); err != nil {
			return g, err
		}
		if g.Tokens == p.MaxTokens {
			g.Finish = FinishLength
			return g, nil
		}
		g.Tokens++
		if !emit(piece) {
			g.Finish = FinishStop
			return g, nil
		}
	}
	if s.end && g.Tokens < p.MaxTokens {
		g.Tokens++
		g.Finish = FinishStop
		return g, nil
	}
	g.Finish = FinishLength
	return g, nil
}

func newTestServer(t *testing.T, b Backend) *httptest.Server {
	t.Helper()
	ts := httptest.NewServer(New(b, Options{MaxBodyBytes: 1 << 12}))
	t.Cleanup(ts.Close)
	return ts
}

func post(t *testing.T, url, body string) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// streamText joins a stream's text and returns its finish reason; it fails
// unless the stream ends with [DONE].
func streamText(t *testing.T, body []byte, chat bool) (text, finish string) {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	done := false
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		if done {
			t.Fatalf("data after [DONE]: %q", line)
		}
		payload, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("stream line %q is not a data event", line)
		}
		if payload == "[DONE]" {
			done = true
			continue
		}
		var chunk struct {
			Choices []struct {
				Text         string `json:"text"`
				Delta        struct{ Content string }
				FinishReason *string `json:"finish_reason"`
			}
		}
		if err := json.Unmarshal([]byte(payload), &chunk); err != nil {
			t.Fatalf("chunk %q: %v", payload, err)
		}
		for _, c := range chunk.Choices {
			if chat {
				text += c.Delta.Content
			} else {
				text += c.Text
			}
			if c.FinishReason != nil {
				finish = *c.FinishReason
			}
		}
	}
	if !done {
		t.Fatalf("stream did not end with [DONE]:\n%s", body)
	}
	return text, finish
}

func TestModelsListsTheServedModel(t *testing.T) {
	ts := newTestServer(t, &scripted{context: 64})
	resp, err := http.Get(ts.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got struct {
		Object string
		Data   []struct{ ID, Object string }
	}
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || got.Object != "list" || len(got.Data) != 1 || got.Data[0].ID != "tiny" || got.Data[0].Object != "model" {
		t.Fatalf("GET /v1/models = %d %+v, want one model tiny", resp.StatusCode, got)
	}
}

func TestCompletionWholeAndStreamedAgree(t *testing.T) {
	b := &scripted{pieces: []string{"Hel", "lo", ", wor", "ld"}, end: true, context: 64}
	ts := newTestServer(t, b)
	for _, tc := range []struct {
		max        int
		text, stop string
	}{{10, "Hello, world", "stop"}, {2, "Hello", "length"}} {
		resp, body := post(t, ts.URL+"/v1/completions", fmt.Sprintf(`{"model":"tiny","prompt":"Hi","max_tokens":%d}`, tc.max))
		var got struct {
			Object  string
			Choices []struct {
				Text         string
				FinishReason string `json:"finish_reason"`
			}
			Usage struct{ PromptTokens, CompletionTokens, TotalTokens int } `json:"usage"`
		}
		if err := json.Unmarshal(body, &got); err != nil || resp.StatusCode != 200 {
			t.Fatalf("max_tokens %d: %d %s (%v)", tc.max, resp.StatusCode, body, err)
		}
		if got.Object != "text_completion" || got.Choices[0].Text != tc.text || got.Choices[0].FinishReason != tc.stop {
			t.Fatalf("max_tokens %d: %s, want text %q finish %q", tc.max, body, tc.text, tc.stop)
		}
		var usage struct {
			P int `json:"prompt_tokens"`
			C int `json:"completion_tokens"`
			T int `json:"total_tokens"`
		}
		raw := map[string]json.RawMessage{}
		_ = json.Unmarshal(body, &raw)
		_ = json.Unmarshal(raw["usage"], &usage)
		if usage.P != 2 || usage.T != usage.P+usage.C || usage.C < 1 || usage.C > tc.max {
			t.Fatalf("max_tokens %d: usage %+v, want 2 prompt tokens and at most %d completion tokens", tc.max, usage, tc.max)
		}
		resp, body = post(t, ts.URL+"/v1/completions", fmt.Sprintf(`{"model":"tiny","prompt":"Hi","max_tokens":%d,"stream":true}`, tc.max))
		if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
			t.Fatalf("streamed Content-Type %q, want text/event-stream", ct)
		}
		text, finish := streamText(t, body, false)
		if text != tc.text || finish != tc.stop {
			t.Fatalf("max_tokens %d streamed: %q finish %q, want %q finish %q", tc.max, text, finish, tc.text, tc.stop)
		}
	}
}

func TestChatStreamsDeltasWithRoleFirst(t *testing.T) {
	b := &scripted{pieces: []string{"Par", "is", "."}, end: true, context: 64}
	ts := newTestServer(t, b)
	req := `{"model":"tiny","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":[{"type":"text","text":"Capital of France?"}]}]`
	resp, body := post(t, ts.URL+"/v1/chat/completions", req+`}`)
	var got struct {
		Object  string
		Choices []struct {
			Message      struct{ Role, Content string }
			FinishReason string `json:"finish_reason"`
		}
	}
	if err := json.Unmarshal(body, &got); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%d %s (%v)", resp.StatusCode, body, err)
	}
	if got.Object != "chat.completion" || got.Choices[0].Message.Role != "assistant" || got.Choices[0].Message.Content != "Paris." || got.Choices[0].FinishReason != "stop" {
		t.Fatalf("chat answer %s, want assistant content Paris. finish stop", body)
	}
	_, body = post(t, ts.URL+"/v1/chat/completions", req+`,"stream":true,"stream_options":{"include_usage":true}}`)
	text, finish := streamText(t, body, true)
	if text != "Paris." || finish != "stop" {
		t.Fatalf("streamed %q finish %q, want Paris. stop", text, finish)
	}
	first := strings.SplitN(string(body), "\n\n", 2)[0]
	if !strings.Contains(first, `"role":"assistant"`) {
		t.Fatalf("first chunk %s does not carry the assistant role", first)
	}
	if !strings.Contains(string(body), `"usage":{"completion_tokens":4,"prompt_tokens":`) {
		t.Fatalf("include_usage sent no usage chunk counting 4 tokens:\n%s", body)
	}
}

func TestStopStringsCutTheTextWhereverThePiecesSplit(t *testing.T) {
	b := &scripted{pieces: []string{"one ", "tw", "o ", "thr", "ee END", " four"}, context: 64}
	ts := newTestServer(t, b)
	for _, stop := range []string{`"o thr"`, `["zzz","ee E"]`, `["END","two"]`} {
		want := map[string]string{`"o thr"`: "one tw", `["zzz","ee E"]`: "one two thr", `["END","two"]`: "one "}[stop]
		for _, stream := range []bool{false, true} {
			_, body := post(t, ts.URL+"/v1/completions", fmt.Sprintf(`{"model":"tiny","prompt":"x","max_tokens":20,"stop":%s,"stream":%v}`, stop, stream))
			var text, finish string
			if stream {
				text, finish = streamText(t, body, false)
			} else {
				var got struct {
					Choices []struct {
						Text         string
						FinishReason string `json:"finish_reason"`
					}
				}
				if err := json.Unmarshal(body, &got); err != nil {
					t.Fatal(err)
				}
				text, finish = got.Choices[0].Text, got.Choices[0].FinishReason
			}
			if text != want || finish != "stop" {
				t.Fatalf("stop %s stream %v: %q finish %q, want %q finish stop", stop, stream, text, finish, want)
			}
		}
	}
}

func TestStopperReleasesNothingOfAStopString(t *testing.T) {
	text := "abcabd and more"
	for cut := 1; cut < len(text); cut++ {
		for cut2 := cut; cut2 < len(text); cut2++ {
			s := stopper{stops: []string{"abd", "xyz"}}
			var out string
			var stopped bool
			for _, p := range []string{text[:cut], text[cut:cut2], text[cut2:]} {
				r, st := s.add(p)
				out += r
				if strings.Contains(out, "ab") && !strings.HasPrefix("abcabd", out) {
					t.Fatalf("released %q", out)
				}
				if st {
					stopped = true
					break
				}
			}
			out += s.flush()
			if !stopped || out != "abc" {
				t.Fatalf("split %d,%d: %q stopped %v, want abc stopped", cut, cut2, out, stopped)
			}
		}
	}
}

func TestMalformedRequestsGetTheErrorShape(t *testing.T) {
	b := &scripted{pieces: []string{"ok"}, end: true, context: 16}
	ts := newTestServer(t, b)
	cases := []struct {
		method, path, body string
		status             int
		param              string
	}{
		{"POST", "/v1/completions", `{"model":"tiny","prompt":`, 400, ""},
		{"POST", "/v1/completions", `not json`, 400, ""},
		{"POST", "/v1/completions", `{"model":"gpt-4","prompt":"hi"}`, 404, "model"},
		{"POST", "/v1/completions", `{"model":"tiny","prompt":"hi","max_tokens":0}`, 400, "max_tokens"},
		{"POST", "/v1/completions", `{"model":"tiny","prompt":"hi","max_tokens":"ten"}`, 400, "max_tokens"},
		{"POST", "/v1/completions", `{"model":"tiny","prompt":"hi","max_tokens":15}`, 400, "max_tokens"},
		{"POST", "/v1/completions", `{"model":"tiny","prompt":"0123456789abcdef"}`, 400, "prompt"},
		{"POST", "/v1/completions", `{"model":"tiny","prompt":7}`, 400, "prompt"},
		{"POST", "/v1/completions", `{"model":"tiny","prompt":"hi","temperature":3}`, 400, "temperature"},
		{"POST", "/v1/completions", `{"model":"tiny","prompt":"hi","n":2}`, 400, "n"},
		{"POST", "/v1/completions", `{"model":"tiny","prompt":"hi","stop":["a","b","c","d","e"]}`, 400, "stop"},
		{"POST", "/v1/chat/completions", `{"model":"tiny"}`, 400, "messages"},
		{"POST", "/v1/chat/completions", `{"model":"tiny","messages":[{"role":"wizard","content":"hi"}]}`, 400, "messages[0].role"},
		{"POST", "/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":{"a":1}}]}`, 400, "messages[0].content"},
		{"POST", "/v1/chat/completions", `{"model":"tiny","messages":"hi"}`, 400, "messages"},
		{"POST", "/v1/completions", `{"model":"tiny","prompt":"` + strings.Repeat("x", 5000) + `"}`, 413, ""},
		{"GET", "/v1/completions", ``, 405, ""},
		{"POST", "/v1/nothing", `{}`, 404, ""},
	}
	for _, c := range cases {
		req, _ := http.NewRequest(c.method, ts.URL+c.path, strings.NewReader(c.body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s %.60s: %v", c.method, c.path, c.body, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var shape struct {
			Error *struct {
				Message string  `json:"message"`
				Type    string  `json:"type"`
				Param   *string `json:"param"`
			} `json:"error"`
		}
		if err := json.Unmarshal(body, &shape); err != nil || shape.Error == nil || shape.Error.Message == "" || shape.Error.Type == "" {
			t.Fatalf("%s %.60s: body %s is not the error shape", c.path, c.body, body)
		}
		gotParam := ""
		if shape.Error.Param != nil {
			gotParam = *shape.Error.Param
		}
		if resp.StatusCode != c.status || gotParam != c.param {
			t.Fatalf("%s %.60s: %d param %q (%s), want %d param %q", c.path, c.body, resp.StatusCode, gotParam, shape.Error.Message, c.status, c.param)
		}
	}
	_, body := post(t, ts.URL+"/v1/completions", `{"model":"tiny","prompt":"hi"}`)
	if !strings.Contains(string(body), `"text":"ok"`) {
		t.Fatalf("after the malformed requests the server answered %s", body)
	}
}

func TestConcurrentRequestsRunOneAtATime(t *testing.T) {
	b := &scripted{pieces: []string{"a", "b", "c"}, end: true, context: 64}
	ts := newTestServer(t, b)
	var wg sync.WaitGroup
	errs := make(chan string, 16)
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := fmt.Sprintf(`{"model":"tiny","prompt":"p%d","max_tokens":8,"stream":%v}`, i, i%2 == 0)
			resp, err := http.Post(ts.URL+"/v1/completions", "application/json", strings.NewReader(body))
			if err != nil {
				errs <- err.Error()
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if !strings.Contains(string(b), "c") {
				errs <- string(b)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatalf("a concurrent request failed: %s", e)
	}
	if b.overlap.Load() {
		t.Fatal("two generations ran at once")
	}
}

func TestClientThatLeavesFreesTheModel(t *testing.T) {
	b := &scripted{pieces: []string{"a", "b", "c"}, end: true, context: 64,
		started: make(chan struct{}, 4), release: make(chan struct{})}
	ts := newTestServer(t, b)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/v1/completions",
		strings.NewReader(`{"model":"tiny","prompt":"x","max_tokens":8,"stream":true}`))
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	<-b.started // the first client's generation holds the model
	cancel()
	<-done
	close(b.release) // the next generation runs freely
	deadline := time.After(30 * time.Second)
	answered := make(chan []byte, 1)
	go func() {
		_, body := post(t, ts.URL+"/v1/completions", `{"model":"tiny","prompt":"y","max_tokens":8}`)
		answered <- body
	}()
	select {
	case body := <-answered:
		if !strings.Contains(string(body), `"text":"abc"`) {
			t.Fatalf("after the first client left, the second got %s", body)
		}
	case <-deadline:
		t.Fatal("the model stayed held after its client left")
	}
}
