package serve

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// adapted is a scripted backend that serves adapters: each generation
// answers with the name of the adapter it was asked for ("base" for
// none).
type adapted struct {
	scripted
	adapters []string
}

func (a *adapted) Adapters() []string { return a.adapters }

func (a *adapted) Generate(ctx context.Context, prompt []int32, p Params, emit func(string) bool) (Generation, error) {
	name := p.Adapter
	if name == "" {
		name = "base"
	}
	emit(name)
	return Generation{Tokens: 1, Finish: FinishStop}, nil
}

// TestAdaptersPickedByModel checks a backend with adapters: /v1/models
// lists the base and each adapter (its parent the base), a request's
// "model" picks the adapter the backend generates with (the base's id or
// none: the base) and the answer names it, concurrent requests of
// different adapters each get their own, and an unknown model is answered
// 404 model_not_found in the API's error shape.
func TestAdaptersPickedByModel(t *testing.T) {
	b := &adapted{scripted: scripted{context: 64, batch: 4}, adapters: []string{"poet", "coder"}}
	ts := newTestServer(t, b)
	resp, err := http.Get(ts.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Data []struct{ ID, Parent string }
	}
	err = json.NewDecoder(resp.Body).Decode(&list)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Data) != 3 || list.Data[0].ID != "tiny" || list.Data[0].Parent != "" ||
		list.Data[1].ID != "poet" || list.Data[1].Parent != "tiny" || list.Data[2].ID != "coder" || list.Data[2].Parent != "tiny" {
		t.Fatalf("GET /v1/models: %+v, want tiny, then poet and coder with parent tiny", list.Data)
	}
	models := map[string]string{`"tiny"`: "base", `""`: "base", `null`: "base", `"poet"`: "poet", `"coder"`: "coder"}
	var wg sync.WaitGroup
	errs := make(chan error, 4*len(models))
	for range 4 {
		for model, want := range models {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for _, path := range []string{"/v1/completions", "/v1/chat/completions"} {
					body := fmt.Sprintf(`{"model":%s,"prompt":"hi","messages":[{"role":"user","content":"hi"}]}`, model)
					resp, raw := post(t, ts.URL+path, body)
					var got struct {
						Model   string
						Choices []struct {
							Text    string
							Message struct{ Content string }
						}
					}
					if err := json.Unmarshal(raw, &got); err != nil || resp.StatusCode != 200 || len(got.Choices) != 1 {
						errs <- fmt.Errorf("%s model %s: %d %s", path, model, resp.StatusCode, raw)
						return
					}
					text := got.Choices[0].Text + got.Choices[0].Message.Content
					wantModel := want
					if want == "base" {
						wantModel = "tiny"
					}
					if text != want || got.Model != wantModel {
						errs <- fmt.Errorf("%s model %s: text %q from model %q, want %q from %q", path, model, text, got.Model, want, wantModel)
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	resp, raw := post(t, ts.URL+"/v1/completions", `{"model":"painter","prompt":"hi"}`)
	var shape struct {
		Error struct{ Message, Type, Param, Code string }
	}
	if err := json.Unmarshal(raw, &shape); err != nil || resp.StatusCode != http.StatusNotFound || shape.Error.Code != "model_not_found" ||
		shape.Error.Param != "model" || shape.Error.Type != "invalid_request_error" {
		t.Fatalf("an unknown model: %d %s, want 404 model_not_found", resp.StatusCode, raw)
	}
	for _, id := range []string{`"painter"`, `"tiny"`, `"poet"`, `"coder"`} {
		if !strings.Contains(shape.Error.Message, id) {
			t.Fatalf("the 404's message %q does not name %s", shape.Error.Message, id)
		}
	}
}
