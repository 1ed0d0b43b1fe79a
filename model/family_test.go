package model

import (
	"math"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/internal/mlxtest"
	"github.com/posttrainllm/posttrainllm/mlx"
)

// familyConfigs are small models of each family: TinyGPT, GPT-2 (LayerNorm
// with biases, learned positions, tanh GELU, tied head) and Llama (RMSNorm,
// scaled RoPE, SwiGLU, grouped-query attention, untied head).
func familyConfigs() map[string]Config {
	return map[string]Config{
		"tinygpt": smallConfig(),
		"gpt2": {VocabSize: 61, DModel: 24, Layers: 2, Heads: 4, Context: 16, TiedEmbeddings: true,
			Norm: NormLayer, Bias: true, Positions: PositionsLearned, GELU: GELUTanh},
		"llama": {VocabSize: 61, DModel: 32, Layers: 2, Heads: 4, KVHeads: 2, Context: 16, MLPHidden: 40,
			Norm: NormRMS, MLP: MLPSwiGLU, RoPEBase: 500000, RoPEScale: 2},
	}
}

func TestFamilyParamCountMatchesSpecs(t *testing.T) {
	for name, c := range familyConfigs() {
		c = c.WithDefaults()
		n := 0
		for _, s := range c.Specs() {
			n += s.Size()
		}
		if got := c.ParamCount(); got != float64(n) {
			t.Errorf("%s: ParamCount %g; the specs hold %d", name, got, n)
		}
	}
}

func TestValidateRejectsBadFamilyFields(t *testing.T) {
	cases := map[string]func(*Config){
		"norm":       func(c *Config) { c.Norm = "batch" },
		"positions":  func(c *Config) { c.Positions = "alibi" },
		"mlp":        func(c *Config) { c.MLP = "relu" },
		"gelu":       func(c *Config) { c.GELU = "sigmoid" },
		"kv_heads":   func(c *Config) { c.KVHeads = 3 },
		"mlp_hidden": func(c *Config) { c.MLPHidden = -1 },
		"rope_scale": func(c *Config) { c.RoPEScale = math.Inf(1) },
	}
	for field, mutate := range cases {
		c := smallConfig()
		mutate(&c)
		_, err := New(c)
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: New(%+v) gave %v, want an error naming the field", field, c, err)
		}
	}
}

// Feeding a sequence through the KV cache in pieces (a prompt, single
// tokens, a chunk of several) gives the logits of one uncached pass over
// the whole sequence, for every family.
func TestCachedLogitsMatchUncached(t *testing.T) {
	for name, c := range familyConfigs() {
		mlxtest.Run(t, func(t testing.TB) {
			m, err := New(c)
			if err != nil {
				t.Fatal(err)
			}
			params, err := m.Init(3)
			if err != nil {
				t.Fatal(err)
			}
			defer mlx.Free(params...)
			const T = 12
			seq := tokens(t, 2, T, c.VocabSize, 4)
			full, err := m.Logits(params, seq).Float32s()
			if err != nil {
				t.Fatal(err)
			}
			cache := m.NewKVCache()
			defer cache.Free()
			V := c.PaddedVocab()
			pos := 0
			for _, n := range []int{5, 1, 1, 3, 1, 1} {
				part := mlx.Slice(seq, []int{0, pos}, []int{2, pos + n})
				got, err := m.LogitsCached(params, part, cache).Float32s()
				if err != nil {
					t.Fatal(err)
				}
				for b := range 2 {
					for i := range n {
						for v := range V {
							g, w := got[(b*n+i)*V+v], full[(b*T+pos+i)*V+v]
							if math.Abs(float64(g-w)) > 1e-4*(1+math.Abs(float64(w))) {
								t.Fatalf("%s: batch %d position %d logit %d: %g cached, %g uncached", name, b, pos+i, v, g, w)
							}
						}
					}
				}
				pos += n
				if cache.Offset != pos {
					t.Fatalf("%s: cache offset %d after %d tokens", name, cache.Offset, pos)
				}
			}
		})
	}
}
