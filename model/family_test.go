package model

import (
	"math"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/internal/mlxtest"
	"github.com/posttrainllm/posttrainllm/mlx"
)

// familyConfigs are small models of each family: TinyGPT (the defaults), GPT-2 (LayerNorm
// with biases, learned positions, tanh GELU, tied head), Llama (RMSNorm,
// linearly scaled RoPE, SwiGLU, grouped-query attention, untied head),
// Llama 3 (its scaled frequencies, a head width other than d_model/heads,
// attention biases), Qwen2 (q/k/v biases, tied head) and Qwen3 (per-head
// q/k norms, a head width other than d_model/heads), Mistral (a sliding
// window on every layer) and Gemma 3 (sliding layers with a rotary base of
// their own interleaved with global ones, post-norms, a GeGLU MLP, scaled
// tied embeddings, query_pre_attn_scalar). Phi-3 computes what Llama does.
func familyConfigs() map[string]Config {
	llama := Config{VocabSize: 61, DModel: 32, Layers: 2, Heads: 4, KVHeads: 2, Context: 16, MLPHidden: 40,
		Norm: NormRMS, MLP: MLPSwiGLU, RoPEBase: 500000}
	llama3, qwen2, qwen3, mistral := llama, llama, llama, llama
	llama.RoPEScale = 2
	llama3.HeadDimension, llama3.QKVBias, llama3.OutBias = 12, true, true
	llama3.RoPEType, llama3.RoPEFactor, llama3.RoPELowFreqFactor, llama3.RoPEHighFreqFactor, llama3.RoPEOriginalContext = RoPELlama3, 8, 1, 4, 64
	qwen2.QKVBias, qwen2.TiedEmbeddings, qwen2.RoPEBase = true, true, 1e6
	qwen3.QKNorm, qwen3.HeadDimension, qwen3.TiedEmbeddings, qwen3.RoPEBase = true, 16, true, 1e6
	mistral.SlidingWindow = 8
	gemma := Config{VocabSize: 61, DModel: 32, Layers: 3, Heads: 4, KVHeads: 1, HeadDimension: 16, Context: 16, MLPHidden: 40,
		Norm: NormRMS, MLP: MLPGeGLU, GELU: GELUTanh, RoPEBase: 1e6, RoPELocalBase: 10000, SlidingWindow: 4, SlidingPattern: 2,
		QKNorm: true, PostNorms: true, EmbedScale: true, TiedEmbeddings: true, QueryScale: 12, NormEps: 1e-6}
	return map[string]Config{
		"tinygpt": smallConfig(),
		"gpt2": {VocabSize: 61, DModel: 24, Layers: 2, Heads: 4, Context: 16, TiedEmbeddings: true,
			Norm: NormLayer, Bias: true, Positions: PositionsLearned, GELU: GELUTanh},
		"llama": llama, "llama3": llama3, "qwen2": qwen2, "qwen3": qwen3, "mistral": mistral, "gemma3": gemma,
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
		"norm":                            func(c *Config) { c.Norm = "batch" },
		"positions":                       func(c *Config) { c.Positions = "alibi" },
		"mlp":                             func(c *Config) { c.MLP = "relu" },
		"gelu":                            func(c *Config) { c.GELU = "sigmoid" },
		"kv_heads":                        func(c *Config) { c.KVHeads = 3 },
		"mlp_hidden":                      func(c *Config) { c.MLPHidden = -1 },
		"rope_scale":                      func(c *Config) { c.RoPEScale = math.Inf(1) },
		"head_dim":                        func(c *Config) { c.HeadDimension = -4 },
		"rope_type":                       func(c *Config) { c.RoPEType = "yarn" },
		"rope_factor = 8 needs rope_type": func(c *Config) { c.RoPEFactor = 8 },
		"rope_high_freq_factor": func(c *Config) {
			c.RoPEType, c.RoPEFactor, c.RoPELowFreqFactor, c.RoPEHighFreqFactor, c.RoPEOriginalContext = RoPELlama3, 8, 4, 4, 64
		},
		"rope_original_context": func(c *Config) {
			c.RoPEType, c.RoPEFactor, c.RoPELowFreqFactor, c.RoPEHighFreqFactor = RoPELlama3, 8, 1, 4
		},
		"sliding_window": func(c *Config) { c.SlidingWindow = -1 },
		"sliding_pattern = 6 needs a sliding_window":     func(c *Config) { c.SlidingPattern = 6 },
		"rope_local_base = 10000 needs a sliding_window": func(c *Config) { c.RoPELocalBase = 10000 },
		"query_scale":           func(c *Config) { c.QueryScale = math.NaN() },
		"post_norms needs norm": func(c *Config) { c.PostNorms, c.Norm = true, NormLayer },
		"rope_scale = 2 with rope_type": func(c *Config) {
			c.RoPEType, c.RoPEFactor, c.RoPELowFreqFactor, c.RoPEHighFreqFactor, c.RoPEOriginalContext, c.RoPEScale = RoPELlama3, 8, 1, 4, 64, 2
		},
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
