package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/posttrainllm/posttrainllm/generate"
	"github.com/posttrainllm/posttrainllm/internal/tokentest"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/peft"
	"github.com/posttrainllm/posttrainllm/serve"
)

// randomAdapter returns an adapter of cfg over net whose B factors (and
// DoRA magnitudes) are drawn at random, so that it changes the model.
func randomAdapter(t *testing.T, net *model.Transformer, params []*mlx.Array, cfg peft.Config, seed uint64) generate.Adapter {
	t.Helper()
	spec, err := peft.New(cfg, net.Specs)
	if err != nil {
		t.Fatal(err)
	}
	arrays, err := spec.Init(seed, params)
	if err != nil {
		t.Fatal(err)
	}
	err = mlx.Do(func() error {
		keys := mlx.RandomSplit(mlx.RandomKey(seed), len(arrays))
		for i, s := range spec.Specs {
			next := arrays[i]
			switch {
			case strings.HasSuffix(s.Name, ".lora_B"):
				next = mlx.RandomNormal(s.Shape, mlx.Float32, 0, 0.5, keys[i])
			case strings.HasSuffix(s.Name, ".magnitude"):
				next = mlx.Multiply(arrays[i], mlx.RandomUniform(s.Shape, mlx.Float32, 0.6, 1.4, keys[i]))
			}
			if err := mlx.Eval(next); err != nil {
				return err
			}
			arrays[i] = next
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return generate.Adapter{Spec: spec, Params: arrays}
}

// completionText posts a greedy completion of prompt for model and
// returns its text and the model the answer names.
func completionText(url, model, prompt string, tokens int) (string, string, error) {
	body, _ := json.Marshal(map[string]any{"model": model, "prompt": prompt, "max_tokens": tokens, "temperature": 0})
	resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(string(body)))
	if err != nil {
		return "", "", err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", "", err
	}
	var out struct {
		Model   string
		Choices []struct{ Text string }
	}
	if err := json.Unmarshal(raw, &out); err != nil || resp.StatusCode != http.StatusOK || len(out.Choices) != 1 {
		return "", "", fmt.Errorf("model %s: %d %s", model, resp.StatusCode, raw)
	}
	return out.Choices[0].Text, out.Model, nil
}

// The server's backend with two adapters (LoRA and DoRA) on one engine
// answers concurrent requests of the base and both adapters: each greedy
// completion is the one the adapter merged into the weights gives alone
// (the one-sequence decoder), and the adapters change the text.
func TestServeAdaptersPerRequest(t *testing.T) {
	tok := tokentest.NewBytes("<|endoftext|>", "<|endoftext|>")
	net, err := model.New(model.Config{VocabSize: tok.VocabSize(), DModel: 32, Layers: 2, Heads: 4, KVHeads: 2, Context: 128,
		MLP: "swiglu", InitStd: 0.3})
	if err != nil {
		t.Fatal(err)
	}
	params, err := net.Init(7)
	if err != nil {
		t.Fatal(err)
	}
	ends := []int32{tok.EOT()}
	m := generate.NewModel(net, params, tok, nil, ends, func() { mlx.Free(params...) })
	defer m.Close()
	adapters := map[string]generate.Adapter{
		"poet":  randomAdapter(t, net, params, peft.Config{Method: peft.LoRA, Rank: 4, Alpha: 8, Targets: []string{"all"}}, 3),
		"coder": randomAdapter(t, net, params, peft.Config{Method: peft.DoRA, Rank: 2, Alpha: 4, Targets: []string{"attn"}}, 4),
	}
	e, err := m.NewEngine(generate.EngineOptions{MaxBatch: 4, PrefillChunk: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	for name, a := range adapters {
		if err := e.SetAdapter(name, a); err != nil {
			t.Fatal(err)
		}
	}
	ts := httptest.NewServer(serve.New(&modelBackend{id: "tiny", m: m, e: e, adapters: []string{"poet", "coder"}}, serve.Options{}))
	defer ts.Close()

	prompts := []string{"To be, or not", "Once upon a time there was a", "x", "The quick brown fox jumps"}
	const tokens = 16
	want := map[string]map[string]string{} // model -> prompt -> text
	for _, id := range []string{"tiny", "poet", "coder"} {
		ref, weights := m, params
		if a, ok := adapters[id]; ok {
			if weights, err = a.Spec.Fuse(params, a.Params); err != nil {
				t.Fatal(err)
			}
			merged := weights
			ref = generate.NewModel(net, weights, tok, nil, ends, func() { mlx.Free(merged...) })
			defer ref.Close()
		}
		want[id] = map[string]string{}
		for _, p := range prompts {
			res, err := ref.Generate(context.Background(), generate.Request{Prompt: p, Options: generate.Options{Sampling: generate.Sampling{MaxTokens: tokens}}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			want[id][p] = asJSONText(res.Text)
		}
	}
	for _, id := range []string{"poet", "coder"} {
		if maps.Equal(want[id], want["tiny"]) {
			t.Fatalf("adapter %s gives the base's text for every prompt: the comparison shows nothing", id)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for round := range 2 {
		for _, id := range []string{"tiny", "poet", "coder"} {
			for _, p := range prompts {
				wg.Add(1)
				go func() {
					defer wg.Done()
					text, named, err := completionText(ts.URL, id, p, tokens)
					if err == nil && (text != want[id][p] || named != id) {
						err = fmt.Errorf("round %d, model %s, prompt %q: %q from %s, alone %q", round, id, p, text, named, want[id][p])
					}
					if err != nil {
						errs <- err
					}
				}()
			}
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if st := e.Stats(); st.MaxRows < 2 {
		t.Errorf("the engine decoded at most %d rows together: the requests did not share batches", st.MaxRows)
	}
}

// serve --adapter NAME=RUN serves LoRA and DoRA fine-tunes beside their
// base: /v1/models lists them, each request's model picks the text
// sample --adapter gives for that fine-tune (the base's for the base's
// id), an unknown model is 404, and malformed --adapter values are usage
// errors.
func TestServeAdapterFlag(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(dir, "base")
	mustRun(t, "train", "--preset", "tiny", "--steps", "10", "--corpus", writeCorpus(t, dir, "corpus.txt", 40_000),
		"--out", base, "--no-progress")
	records := writeRecords(t, dir, "train.jsonl", 40)
	lora, dora := filepath.Join(dir, "lora"), filepath.Join(dir, "dora")
	mustRun(t, "finetune", "--from", base, "--data", records, "--out", lora, "--steps", "10", "--lr", "0.1",
		"--targets", "attn,mlp", "--no-progress")
	mustRun(t, "finetune", "--from", base, "--data", records, "--out", dora, "--steps", "10", "--lr", "0.1",
		"--method", "dora", "--targets", "all", "--no-progress")

	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--adapter", "a=" + lora, "--adapter", "a=" + dora}, []string{"a", "twice"}},
		{[]string{"--adapter", lora, "--adapter", "a=" + dora}, []string{"do not mix"}},
		{[]string{"--adapter", lora, "--adapter", dora}, []string{"2 times"}},
		{[]string{"--adapter", "=" + lora}, []string{"NAME=RUN"}},
		{[]string{"--adapter", "a=" + filepath.Join(dir, "missing")}, []string{"invalid --adapter"}},
		{[]string{"--adapter", "base=" + lora, "--model", "base"}, []string{"base model's id"}},
	} {
		r := runCLI(t, append([]string{"serve", "--from", base, "--device", "cpu", "--addr", "127.0.0.1:0"}, tc.args...)...)
		checkCleanFailure(t, strings.Join(tc.args, " "), r, tc.want...)
	}

	url := startServe(t, "--from", base, "--model", "base", "--adapter", "lora="+lora, "--adapter", "dora="+dora, "--max-batch", "4")
	resp, err := http.Get(url + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var list struct{ Data []struct{ ID string } }
	err = json.NewDecoder(resp.Body).Decode(&list)
	resp.Body.Close()
	if err != nil || len(list.Data) != 3 || list.Data[0].ID != "base" || list.Data[1].ID != "lora" || list.Data[2].ID != "dora" {
		t.Fatalf("GET /v1/models: %+v (%v), want base, lora and dora", list.Data, err)
	}
	prompt := "ROMEO: "
	gen := []string{"--prompt", prompt, "--tokens", "12", "--temperature", "0", "--device", "cpu"}
	want := map[string]string{
		"base": mustRun(t, append([]string{"sample", "--from", base}, gen...)...).stdout,
		"lora": mustRun(t, append([]string{"sample", "--from", base, "--adapter", lora}, gen...)...).stdout,
		"dora": mustRun(t, append([]string{"sample", "--from", base, "--adapter", dora}, gen...)...).stdout,
	}
	if want["lora"] == want["base"] || want["dora"] == want["base"] {
		t.Fatalf("a fine-tune samples the base's text: %q: the comparison shows nothing", want)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for range 2 {
		for id, w := range want {
			wg.Add(1)
			go func() {
				defer wg.Done()
				text, _, err := completionText(url, id, prompt, 12)
				if err == nil && prompt+text != asJSONText(strings.TrimSuffix(w, "\n")) {
					err = fmt.Errorf("model %s: %q, sample %q", id, prompt+text, w)
				}
				if err != nil {
					errs <- err
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if _, _, err := completionText(url, "painter", prompt, 4); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("an unknown model: %v, want 404", err)
	}
}
