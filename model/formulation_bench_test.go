package model

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/posttrainllm/posttrainllm/internal/mlxtest"
	"github.com/posttrainllm/posttrainllm/mlx"
)

// formulationVariant is one cell of BenchmarkFormulations.
type formulationVariant struct {
	name string
	gelu string
	f    formulation
}

// benchVariants are the formulations BenchmarkFormulations compares on the
// default device: the GPU's, each of its choices undone alone, all undone,
// the one formulationFor picks for the device, and that one with the tanh
// GELU. The fused loss is not undone alone: on the CPU MLX's fused
// cross-entropy falls back to the same ops as the float32 path, and the
// graphs are identical.
func benchVariants() []formulationVariant {
	gpu := formulationFor(mlx.GPU, Config{})
	without := func(edit func(*formulation)) formulation { f := gpu; edit(&f); return f }
	here := formulationFor(mlx.DefaultDevice(), Config{})
	return []formulationVariant{
		{"gpu", GELUExact, gpu},
		{"gpu-no-written-gelu", GELUExact, without(func(f *formulation) { f.writtenGELU = false })},
		{"gpu-no-stacked-qkv", GELUExact, without(func(f *formulation) { f.stackedQKV = false })},
		{"gpu-no-addmm", GELUExact, without(func(f *formulation) { f.addMMResidual = false })},
		{"plain", GELUExact, formulation{}},
		{"chosen", GELUExact, here},
		{"chosen-tanh", GELUTanh, here},
	}
}

// BenchmarkFormulations times the compiled forward and backward pass (loss
// and all gradients) of the small preset's model — 4 layers of width 128,
// vocabulary 256, batch 8 × 128 tokens, float32 — in each formulation of
// benchVariants, side by side: every round runs each variant once, in an
// order rotated by the round, and the benchmark reports each variant's
// median over the rounds (b.N rounds) and the median over the rounds of its
// time divided by the "gpu" variant's time in the same round. Run it as
//
//	go test ./model -run '^$' -bench Formulations -benchtime 9x -v
//
// With -v it also logs each variant's op counts (mlx.GraphOps) before and
// after compilation.
func BenchmarkFormulations(b *testing.B) {
	cfg := Config{VocabSize: 256, DModel: 128, Layers: 4, Heads: 4, Context: 128}
	const batch = 8
	mlxtest.Run(b, func(t testing.TB) {
		variants := benchVariants()
		steps := make([]*mlx.Closure, len(variants))
		var params []*mlx.Array
		for i, v := range variants {
			c := cfg
			c.GELU = v.gelu
			m, err := New(c)
			if err != nil {
				t.Fatal(err)
			}
			if params == nil {
				if params, err = m.Init(1); err != nil {
					t.Fatal(err)
				}
			}
			n := len(params)
			argnums := make([]int, n)
			for j := range argnums {
				argnums[j] = j
			}
			f := v.f
			vg, err := mlx.ValueAndGrad(func(in []*mlx.Array) ([]*mlx.Array, error) {
				return []*mlx.Array{m.loss(in[:n], in[n], in[n+1], f)}, nil
			}, argnums...)
			if err != nil {
				t.Fatal(err)
			}
			defer vg.Free()
			step := func(in []*mlx.Array) ([]*mlx.Array, error) {
				vals, grads, err := vg.Call(in...)
				return append(vals, grads...), err
			}
			if steps[i], err = mlx.Compile(step); err != nil {
				t.Fatal(err)
			}
			defer steps[i].Free()
			x, y := benchTokens(batch, cfg.Context, cfg.VocabSize, 0), benchTokens(batch, cfg.Context, cfg.VocabSize, 1)
			in := append(append([]*mlx.Array{}, params...), x, y)
			if b.N == 1 { // the first of the benchmark's runs
				t.Logf("%-20s %+v", v.name, v.f)
				for _, g := range []struct {
					name string
					fn   func([]*mlx.Array) ([]*mlx.Array, error)
				}{{"interpreted", step}, {"compiled", func(in []*mlx.Array) ([]*mlx.Array, error) { return steps[i].Call(in...) }}} {
					if out, err := g.fn(in); err == nil {
						ops, _ := mlx.GraphOps(out...)
						t.Logf("    %s graph: %s", g.name, summarizeOps(ops))
						mlx.Free(out...)
					}
				}
			}
		}
		x, y := benchTokens(batch, cfg.Context, cfg.VocabSize, 0), benchTokens(batch, cfg.Context, cfg.VocabSize, 1)
		in := append(append([]*mlx.Array{}, params...), x, y)
		run := func(i int) time.Duration {
			start := time.Now()
			out, err := steps[i].Call(in...)
			if err == nil {
				err = mlx.Eval(out...)
			}
			if err != nil {
				t.Fatal(err)
			}
			d := time.Since(start)
			mlx.Free(out...)
			return d
		}
		for i := range steps { // warm-up: tracing and the CPU's kernel JIT
			for range 2 {
				run(i)
			}
		}
		times := make([][]time.Duration, len(steps))
		b.ResetTimer()
		for r := range b.N {
			for k := range steps {
				i := (k + r) % len(steps)
				times[i] = append(times[i], run(i))
			}
		}
		b.StopTimer()
		for i, v := range variants {
			ratios := make([]time.Duration, len(times[i])) // per round, in units of 1e-6
			for r := range ratios {
				ratios[r] = time.Duration(1e6 * float64(times[i][r]) / float64(times[0][r]))
			}
			b.ReportMetric(float64(median(times[i]).Microseconds())/1000, "ms/"+v.name)
			b.ReportMetric(float64(median(ratios))/1e6, "x/"+v.name)
		}
	})
}

// benchTokens is a [b, n] int32 batch of tokens below vocab.
func benchTokens(b, n, vocab, seed int) *mlx.Array {
	v := make([]int32, b*n)
	for i := range v {
		v[i] = int32((i*7 + seed*13 + i*i) % vocab)
	}
	return mlx.FromSlice(v, b, n)
}

// median returns the median of ds.
func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// summarizeOps writes op counts as "total N: name count, …", largest first.
func summarizeOps(ops map[string]int) string {
	names := make([]string, 0, len(ops))
	total := 0
	for n, c := range ops {
		names = append(names, n)
		total += c
	}
	sort.Slice(names, func(i, j int) bool {
		if ops[names[i]] != ops[names[j]] {
			return ops[names[i]] > ops[names[j]]
		}
		return names[i] < names[j]
	})
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s %d", n, ops[n])
	}
	return fmt.Sprintf("total %d: %s", total, strings.Join(parts, ", "))
}
