package generate

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/peft"
)

// testAdapter returns an adapter of cfg over net with arrays that change
// the model: B drawn at random (Init leaves it zero) and, for DoRA, the
// magnitudes moved off the base's row norms.
func testAdapter(t testing.TB, net *model.Transformer, params []*mlx.Array, cfg peft.Config, seed uint64) Adapter {
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
		keys := mlx.RandomSplit(mlx.RandomKey(seed+1000), len(arrays))
		for i, s := range spec.Specs {
			var next *mlx.Array
			switch {
			case strings.HasSuffix(s.Name, ".lora_B"):
				next = mlx.RandomNormal(s.Shape, mlx.Float32, 0, 0.5, keys[i])
			case strings.HasSuffix(s.Name, ".magnitude"):
				next = mlx.Multiply(arrays[i], mlx.RandomUniform(s.Shape, mlx.Float32, 0.6, 1.4, keys[i]))
			default:
				continue
			}
			if err := mlx.Eval(next); err != nil {
				return err
			}
			arrays[i].Free()
			arrays[i] = next
		}
		mlx.Free(keys...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mlx.Free(arrays...) })
	return Adapter{Spec: spec, Params: arrays}
}

// merged returns a's weights merged into params (peft.Adapter.Fuse).
func merged(t testing.TB, params []*mlx.Array, a Adapter) []*mlx.Array {
	t.Helper()
	out, err := a.Spec.Fuse(params, a.Params)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mlx.Free(out...) })
	return out
}

// testAdapterConfigs are the adapters the engine is checked with: LoRA
// on the attention, LoRA of another rank on every projection, and DoRA
// on the MLP.
var testAdapterConfigs = map[string]peft.Config{
	"x": {Method: peft.LoRA, Rank: 4, Alpha: 8, Targets: []string{"attn"}},
	"y": {Method: peft.LoRA, Rank: 2, Alpha: 2, Targets: []string{"all"}},
	"z": {Method: peft.DoRA, Rank: 3, Alpha: 6, Targets: []string{"mlp", "wv"}},
}

// greedy returns the greedy completion of seq on an engine of one row
// over params.
func greedyAlone(t *testing.T, net *model.Transformer, params []*mlx.Array, seq Sequence) Completion {
	t.Helper()
	e := newEngine(t, net, params, EngineOptions{MaxBatch: 1})
	out, err := e.Generate(context.Background(), seq)
	if err != nil {
		t.Fatal(err)
	}
	e.Close()
	return out[0]
}

// TestEngineAdaptersMatchMerged submits greedy requests of the base and
// of three adapters (two LoRA of different ranks and targets, one DoRA)
// with ragged prompts to an engine of three rows, so rows of different
// adapters share decode steps and prefill passes, join as others leave
// and read their prompts in chunks; one asks for prompt scores (read on
// its own). Each completion must be the one the adapter merged into the
// weights gives alone, and the base rows the base's.
func TestEngineAdaptersMatchMerged(t *testing.T) {
	for _, family := range []string{"llama", "gpt2", "gemma3"} {
		t.Run(family, func(t *testing.T) {
			cfg := engineFamilies[family]
			net, params := engineNet(t, cfg)
			e := newEngine(t, net, params, EngineOptions{MaxBatch: 3, PrefillChunk: 8})
			adapters := map[string]Adapter{}
			refs := map[string][]*mlx.Array{"": params}
			for i, name := range []string{"x", "y", "z"} {
				adapters[name] = testAdapter(t, net, params, testAdapterConfigs[name], uint64(20+i))
				if err := e.SetAdapter(name, adapters[name]); err != nil {
					t.Fatal(err)
				}
				refs[name] = merged(t, params, adapters[name])
			}
			if got := e.Adapters(); !slices.Equal(got, []string{"x", "y", "z"}) {
				t.Fatalf("Adapters() = %v", got)
			}
			seqs := mixedSequences(cfg.VocabSize)
			names := []string{"", "x", "y", "z", "x", "", "z", "y"}
			for i := range seqs {
				seqs[i].Options = Options{Sampling: Sampling{MaxTokens: seqs[i].MaxTokens}}
				seqs[i].Adapter = names[i]
			}
			seqs[3].PromptLogprobs = true
			streams := make([][]*Stream, len(seqs))
			for i, s := range seqs {
				var err error
				if streams[i], err = e.Submit(context.Background(), s); err != nil {
					t.Fatal(err)
				}
			}
			differ := map[string]bool{}
			for i, s := range seqs {
				got, err := streams[i][0].Wait()
				if err != nil {
					t.Fatal(err)
				}
				alone := s
				alone.Adapter = ""
				want := greedyAlone(t, net, refs[s.Adapter], alone)
				if !slices.Equal(got.Tokens, want.Tokens) {
					t.Fatalf("request %d (adapter %q): in the mixed batch %v, merged alone %v", i, s.Adapter, got.Tokens, want.Tokens)
				}
				if s.Adapter != "" {
					base := greedyAlone(t, net, params, alone)
					differ[s.Adapter] = differ[s.Adapter] || !slices.Equal(base.Tokens, got.Tokens)
				}
			}
			for _, name := range []string{"x", "y", "z"} {
				if !differ[name] {
					t.Errorf("adapter %s gave the base's tokens on every request: the comparison shows nothing", name)
				}
			}
			if st := e.Stats(); st.MaxRows != 3 || st.Traces > 24 {
				t.Fatalf("stats %+v: want 3 rows and a handful of traces", st)
			}
		})
	}
}

// TestEngineAdapterLifecycle checks the errors of unknown and malformed
// adapters, that setting an adapter again with new arrays takes effect
// without a new trace, that a DoRA adapter follows SetParams, and that
// removing an adapter ends its requests.
func TestEngineAdapterLifecycle(t *testing.T) {
	cfg := engineFamilies["llama"]
	net, params := engineNet(t, cfg)
	e := newEngine(t, net, params, EngineOptions{MaxBatch: 2})
	prompt := []int32{5, 9, 14, 2, 77, 130}
	seq := Sequence{Prompt: prompt, Options: Options{Sampling: Sampling{MaxTokens: 12}}, Adapter: "z"}
	if _, err := e.Submit(context.Background(), seq); err == nil || !strings.Contains(err.Error(), `no adapter "z"`) {
		t.Fatalf("Submit with an unknown adapter: %v, want an error naming it", err)
	}
	z := testAdapter(t, net, params, testAdapterConfigs["z"], 3)
	other, err := peft.New(peft.Config{Method: peft.LoRA, Rank: 2, Alpha: 2, Targets: []string{"attn"}}, net.Specs)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []struct {
		name string
		a    Adapter
		want string
	}{
		{"", z, "needs a name"},
		{"z", Adapter{Params: z.Params}, "has no Spec"},
		{"z", Adapter{Spec: z.Spec, Params: z.Params[:2]}, "2 arrays"},
		{"z", Adapter{Spec: other, Params: z.Params[:len(other.Specs)]}, "has shape"},
		{"z", Adapter{Spec: &peft.Adapter{Config: z.Spec.Config, Base: z.Spec.Base, Quant: &peft.Quantized{Bits: 4, GroupSize: 32}}}, "quantized base"},
	} {
		if err := e.SetAdapter(bad.name, bad.a); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Fatalf("SetAdapter(%q, …): %v, want an error saying %q", bad.name, err, bad.want)
		}
	}
	if len(e.Adapters()) != 0 {
		t.Fatalf("refused adapters were registered: %v", e.Adapters())
	}
	if err := e.SetAdapter("z", z); err != nil {
		t.Fatal(err)
	}
	first, err := e.Generate(context.Background(), seq)
	if err != nil {
		t.Fatal(err)
	}
	traces := e.Stats().Traces
	z2 := testAdapter(t, net, params, testAdapterConfigs["z"], 4)
	if err := e.SetAdapter("z", z2); err != nil {
		t.Fatal(err)
	}
	second, err := e.Generate(context.Background(), seq)
	if err != nil {
		t.Fatal(err)
	}
	plain := seq
	plain.Adapter = ""
	if want := greedyAlone(t, net, merged(t, params, z2), plain); !slices.Equal(second[0].Tokens, want.Tokens) || slices.Equal(first[0].Tokens, second[0].Tokens) {
		t.Fatalf("after setting z again: %v, merged %v (before: %v)", second[0].Tokens, want.Tokens, first[0].Tokens)
	}
	if now := e.Stats().Traces; now != traces {
		t.Fatalf("setting an adapter of the same layout again traced %d more times", now-traces)
	}

	// DoRA's magnitudes divide by the norms of the merged weights: they
	// follow the base.
	base2, err := net.Init(12)
	if err != nil {
		t.Fatal(err)
	}
	defer mlx.Free(base2...)
	if err := e.SetParams(base2); err != nil {
		t.Fatal(err)
	}
	third, err := e.Generate(context.Background(), seq)
	if err != nil {
		t.Fatal(err)
	}
	if want := greedyAlone(t, net, merged(t, base2, z2), plain); !slices.Equal(third[0].Tokens, want.Tokens) {
		t.Fatalf("after SetParams: %v, merged over the new base %v", third[0].Tokens, want.Tokens)
	}

	held, err := e.Submit(context.Background(), Sequence{Prompt: prompt, Options: Options{Sampling: Sampling{MaxTokens: 100}}, Adapter: "z"})
	if err != nil {
		t.Fatal(err)
	}
	<-held[0].Tokens
	if err := e.RemoveAdapter("z"); err != nil {
		t.Fatal(err)
	}
	if _, err := held[0].Wait(); err == nil || !strings.Contains(err.Error(), `adapter "z" was removed`) {
		t.Fatalf("a request of a removed adapter: %v", err)
	}
	if err := e.RemoveAdapter("z"); err == nil {
		t.Fatal("removing z twice was accepted")
	}
	if _, err := e.Submit(context.Background(), seq); err == nil {
		t.Fatal("Submit accepted a removed adapter")
	}
	if out, err := e.Generate(context.Background(), plain); err != nil || len(out[0].Tokens) != 12 {
		t.Fatalf("the base after removing every adapter: %v, %v", out, err)
	}
}
