package runfolder

import (
	"testing"

	"github.com/posttrainllm/posttrainllm/generate"
	"github.com/posttrainllm/posttrainllm/model"
)

// BenchmarkGenerate generates 128 tokens after a 16-token prompt with the
// small preset's shape (d_model 384, 6 layers, context 256), through the
// KV cache and by recomputing the context for every token: the ratio of
// the two is what the cache saves. docs/performance/generation.md has the
// figures.
func BenchmarkGenerate(b *testing.B) {
	m, err := model.New(model.Config{VocabSize: 256, DModel: 384, Layers: 6, Heads: 6, Context: 256})
	if err != nil {
		b.Fatal(err)
	}
	params, err := m.Init(1)
	if err != nil {
		b.Fatal(err)
	}
	prompt := make([]int32, 16)
	for i := range prompt {
		prompt[i] = int32(i * 7 % 256)
	}
	for _, recompute := range []bool{false, true} {
		name := "cached"
		if recompute {
			name = "recompute"
		}
		b.Run(name, func(b *testing.B) {
			opts := SampleOptions{Options: generate.Options{Sampling: generate.Sampling{MaxTokens: 128, Temperature: 0}, Recompute: recompute}}
			for b.Loop() {
				if _, err := Generate(m, params, prompt, opts); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(opts.MaxTokens*b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}
