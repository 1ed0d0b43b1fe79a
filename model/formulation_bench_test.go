package model

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"syscall"
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

// benchVariants are the formulations BenchmarkFormulations compares: the
// GPU's; the GELU as plain ops with each combination of stacked qkv and
// AddMM residuals (the last, "plain", is the formulation of the MLX peers in
// bench/peers); and the one formulationFor picks for the default device
// with the tanh GELU. The fused loss is not varied: on the CPU MLX's fused
// cross-entropy falls back to the same ops as the float32 path, and the
// graphs are identical.
func benchVariants() []formulationVariant {
	return []formulationVariant{
		{"gpu", GELUExact, formulationFor(mlx.GPU, Config{})},
		{"gelu-ops", GELUExact, formulation{stackedProjections: true, addMMResidual: true}},
		{"gelu-ops-3-matmuls", GELUExact, formulation{addMMResidual: true}},
		{"gelu-ops-add", GELUExact, formulation{stackedProjections: true}},
		{"plain", GELUExact, formulation{}},
		{"chosen-tanh", GELUTanh, formulationFor(mlx.DefaultDevice(), Config{})},
	}
}

// BenchmarkFormulations times the compiled forward and backward pass (loss
// and all gradients) of the small preset's model — 4 layers of width 128,
// vocabulary 256, batch 8 × 128 tokens, float32 — in each formulation of
// benchVariants, side by side: every round runs each variant once, in an
// order rotated by the round, and the benchmark reports each variant's
// median wall-clock and CPU time (the process's, all threads) over the
// rounds (b.N rounds), and the median over the rounds of its CPU time
// divided by the "gpu" variant's in the same round. Run it as
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
		run := func(i int) (wall, cpu time.Duration) {
			start, cpuStart := time.Now(), cpuTime()
			out, err := steps[i].Call(in...)
			if err == nil {
				err = mlx.Eval(out...)
			}
			if err != nil {
				t.Fatal(err)
			}
			wall, cpu = time.Since(start), cpuTime()-cpuStart
			mlx.Free(out...)
			return wall, cpu
		}
		for i := range steps { // warm-up: tracing and the CPU's kernel JIT
			for range 2 {
				run(i)
			}
		}
		wall, cpu := make([][]time.Duration, len(steps)), make([][]time.Duration, len(steps))
		b.ResetTimer()
		for r := range b.N {
			for k := range steps {
				i := (k + r) % len(steps)
				w, c := run(i)
				wall[i], cpu[i] = append(wall[i], w), append(cpu[i], c)
			}
		}
		b.StopTimer()
		for i, v := range variants {
			b.ReportMetric(float64(median(wall[i]).Microseconds())/1000, "ms/"+v.name)
			b.ReportMetric(float64(median(cpu[i]).Microseconds())/1000, "cpu-ms/"+v.name)
			b.ReportMetric(medianRatio(cpu[i], cpu[0]), "cpu-x/"+v.name)
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

// medianRatio is the median over rounds r of a[r]/b[r].
func medianRatio(a, b []time.Duration) float64 {
	r := make([]float64, len(a))
	for i := range a {
		r[i] = float64(a[i]) / float64(b[i])
	}
	slices.Sort(r)
	return r[len(r)/2]
}

// cpuTime is the CPU time this process has used, all threads together:
// on a machine shared with other jobs it moves less than wall-clock time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
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
