package serve

import (
	"context"
	"math"
	"testing"

	"github.com/posttrainllm/posttrainllm/generate"
)

// recorded is a scripted backend that keeps the Params of its last
// generation.
type recorded struct {
	scripted
	last chan Params
}

func (r *recorded) Generate(ctx context.Context, prompt []int32, p Params, emit func(string) bool) (Generation, error) {
	r.last <- p
	return r.scripted.Generate(ctx, prompt, p, emit)
}

// TestParamsFromRequest checks the sampling settings a request hands the
// backend: the ones it gives (a negative seed taken bit for bit as
// generate's uint64 seed), and the defaults without them (temperature 1,
// top_p 1, /v1/completions' max_tokens, no seed), top-k never limited.
func TestParamsFromRequest(t *testing.T) {
	b := &recorded{scripted: scripted{pieces: []string{"a"}, context: 64}, last: make(chan Params, 1)}
	ts := newTestServer(t, b)
	for _, tc := range []struct {
		body    string
		want    generate.Sampling
		hasSeed bool
	}{
		{`{"prompt":"Hi","max_tokens":3,"temperature":0.5,"top_p":0.9,"seed":-1}`,
			generate.Sampling{MaxTokens: 3, Temperature: 0.5, TopP: 0.9, Seed: math.MaxUint64}, true},
		{`{"prompt":"Hi","seed":7}`, generate.Sampling{MaxTokens: 16, Temperature: 1, TopP: 1, Seed: 7}, true},
		{`{"prompt":"Hi"}`, generate.Sampling{MaxTokens: 16, Temperature: 1, TopP: 1}, false},
	} {
		resp, body := post(t, ts.URL+"/v1/completions", tc.body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", tc.body, resp.StatusCode, body)
		}
		p := <-b.last
		if p.Sampling != tc.want || p.HasSeed != tc.hasSeed {
			t.Errorf("%s: sampling %+v, has seed %v; want %+v, %v", tc.body, p.Sampling, p.HasSeed, tc.want, tc.hasSeed)
		}
	}
}
