package model

import (
	"fmt"
	"math"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/posttrainllm/posttrainllm/internal/mlxtest"
	"github.com/posttrainllm/posttrainllm/mlx"
)

// wideVocabConfig is a model whose loss dominates its memory: a vocabulary
// of vocab padded to a multiple of 64 over a width of 64, so that 4 × 512
// positions of a vocabulary of 65,536 have 512 MiB of float32 logits and
// the rest of the step a few MiB.
func wideVocabConfig(vocab int) Config {
	return Config{VocabSize: vocab, PadVocabTo: 64, DModel: 64, Layers: 1, Heads: 2, Context: 512}
}

// weightedObjective is a fine-tune's loss through LossTerms: the
// cross-entropy weighted per position (zero on the first quarter of each
// row, as a prompt mask) plus a z-loss on the logsumexp, so that both
// terms' cotangents arrive per row.
func weightedObjective(m *Transformer, w *mlx.Array) func(p []*mlx.Array, x, y *mlx.Array) *mlx.Array {
	return adapterObjective(m, w, false)
}

// adapterObjective is weightedObjective, with adapted set through
// LossTermsWith as an adapter fine-tune computes it: the first block
// projection by a Linear (that multiplies by the parameter itself, so the
// loss and gradients stay those of the model).
func adapterObjective(m *Transformer, w *mlx.Array, adapted bool) func(p []*mlx.Array, x, y *mlx.Array) *mlx.Array {
	return func(p []*mlx.Array, x, y *mlx.Array) *mlx.Array {
		var ce, lse *mlx.Array
		if adapted {
			i := slices.IndexFunc(m.Specs, func(s ParamSpec) bool { return s.Kind == Matrix && isBlockProjection(s.Name) })
			apply := func(x *mlx.Array, a []*mlx.Array) *mlx.Array { return mlx.Matmul(x, mlx.Transpose(a[0])) }
			ce, lse = m.LossTermsWith(p, Linears{i: {Arrays: []*mlx.Array{p[i]}, Apply: apply}}, x, y)
		} else {
			ce, lse = m.LossTerms(p, x, y)
		}
		weighted := mlx.Divide(mlx.Sum(mlx.Multiply(ce, w)), mlx.Sum(w))
		return mlx.Add(weighted, mlx.MulScalar(mlx.Mean(mlx.Square(lse)), 1e-3))
	}
}

// compiledStep returns loss's value and gradients with respect to the
// parameters at argnums as one compiled function of (params..., x, y), n
// parameters, and the function that frees it.
func compiledStep(t testing.TB, loss func(p []*mlx.Array, x, y *mlx.Array) *mlx.Array, n int, argnums []int) (*mlx.Closure, func()) {
	t.Helper()
	vg, err := mlx.ValueAndGrad(func(in []*mlx.Array) ([]*mlx.Array, error) {
		return []*mlx.Array{loss(in[:n], in[n], in[n+1])}, nil
	}, argnums...)
	if err != nil {
		t.Fatal(err)
	}
	step, err := mlx.Compile(func(in []*mlx.Array) ([]*mlx.Array, error) {
		vals, grads, err := vg.Call(in...)
		return append(vals, grads...), err
	})
	if err != nil {
		vg.Free()
		t.Fatal(err)
	}
	return step, func() { step.Free(); vg.Free() }
}

// trainable returns the indices of m's parameters a step differentiates:
// all of them, or with frozenHead all but the token embedding and the
// output projection, which adapter fine-tunes leave frozen.
func trainable(m *Transformer, frozenHead bool) []int {
	var out []int
	for i, s := range m.Specs {
		if !frozenHead || (s.Kind != Embedding && s.Kind != Head) {
			out = append(out, i)
		}
	}
	return out
}

// peakOf evaluates step on in and returns its outputs and the peak memory
// MLX allocated meanwhile.
func peakOf(t testing.TB, step *mlx.Closure, in []*mlx.Array) ([]*mlx.Array, uint64) {
	t.Helper()
	mlx.ResetPeakMemory()
	out, err := step.Call(in...)
	if err == nil {
		err = mlx.Eval(out...)
	}
	if err != nil {
		t.Fatal(err)
	}
	return out, mlx.Memory().Peak
}

// compiledPeak returns the peak memory of loss's compiled value and
// gradients with respect to the parameters at argnums (the second call:
// the first traces), the loss and the gradients (nil for the others).
func compiledPeak(t testing.TB, loss func(p []*mlx.Array, x, y *mlx.Array) *mlx.Array,
	params []*mlx.Array, argnums []int, x, y *mlx.Array) (uint64, float64, [][]float64) {
	t.Helper()
	step, free := compiledStep(t, loss, len(params), argnums)
	defer free()
	in := append(append([]*mlx.Array{}, params...), x, y)
	out, _ := peakOf(t, step, in)
	mlx.Free(out...)
	out, peak := peakOf(t, step, in)
	defer mlx.Free(out...)
	v, err := out[0].Item()
	if err != nil {
		t.Fatal(err)
	}
	grads := make([][]float64, len(params))
	for k, g := range out[1:] {
		grads[argnums[k]] = values(t, g)
	}
	return peak, v, grads
}

// The chunked loss keeps the logits out of the step's peak memory: on
// 1,024 positions with 128 MiB of float32 logits (a vocabulary of 32,700
// padded to 32,768), chunks of 32 positions peak at least the logits'
// size below the whole logits, with the same loss and gradients, for a
// weighted cross-entropy with a z-loss and a padded vocabulary, with the
// output projection trained and frozen (an adapter fine-tune through
// LossTermsWith, whose chunks then skip its gradient). The 32 chunks are more than MLX runs
// ahead of the computation (about 100 operations, each allocating its
// output when it is queued): with each chunk in mlx.Checkpoint instead,
// unordered, they all coexisted and the step peaked within 15% of the
// whole logits'.
func TestChunkedLossBoundsPeakMemory(t *testing.T) {
	mlxtest.Run(t, func(t testing.TB) {
		c := wideVocabConfig(32_700)
		m, params := initModel(t, c, 3)
		defer mlx.Free(params...)
		B, T := 2, c.Context
		x, y := tokens(t, B, T, c.VocabSize, 2), tokens(t, B, T, c.VocabSize, 9)
		wv := make([]float32, B*T)
		for i := range wv {
			if i%T >= T/4 {
				wv[i] = 1 + float32(i%3)
			}
		}
		w := mlx.FromSlice(wv, B, T)
		defer mlx.Free(x, y, w)
		logitsBytes := uint64(B * T * c.PaddedVocab() * 4)
		chunked := *m
		chunked.Memory = Memory{LossChunk: 32}
		for _, frozen := range []bool{false, true} {
			argnums := trainable(m, frozen)
			wholePeak, wantLoss, wantGrads := compiledPeak(t, adapterObjective(m, w, frozen), params, argnums, x, y)
			peak, loss, grads := compiledPeak(t, adapterObjective(&chunked, w, frozen), params, argnums, x, y)
			label := fmt.Sprintf("chunks of 32, frozen head %v", frozen)
			t.Logf("%s: peak %.0f MiB whole, %.0f MiB chunked (float32 logits %.0f MiB)",
				label, float64(wholePeak)/(1<<20), float64(peak)/(1<<20), float64(logitsBytes)/(1<<20))
			if peak+logitsBytes > wholePeak {
				t.Errorf("%s: peak %d bytes, %d with the whole logits: want at least %d (the float32 logits) less",
					label, peak, wholePeak, logitsBytes)
			}
			sameLossAndGrads(t, label, m, loss, wantLoss, grads, wantGrads)
		}
	})
}

// BenchmarkChunkedLoss times one compiled value-and-gradient of
// TestChunkedLossBoundsPeakMemory's loss over 4 × 512 positions of a
// vocabulary of 65,536 (512 MiB of float32 logits) with the whole logits
// and in chunks, and reports each one's peak memory (peak-MiB) and the
// process's CPU seconds per call (cpu-s/op: user and system time of every
// thread, MLX's worker included), which other jobs on a shared machine
// move far less than the wall time. The memory-limit case sets MLX's
// memory limit below anything the call holds, so that MLX waits for
// queued work before queueing more; the frozen-head cases differentiate
// neither the token embedding nor the output projection, as adapter
// fine-tunes do.
func BenchmarkChunkedLoss(b *testing.B) {
	for _, bc := range []struct {
		chunk         int
		limit, frozen bool
	}{{0, false, false}, {64, false, false}, {256, false, false}, {1024, false, false}, {64, true, false},
		{0, false, true}, {64, false, true}} {
		name := fmt.Sprintf("chunk=%d", bc.chunk)
		if bc.limit {
			name += "/memory-limit"
		}
		if bc.frozen {
			name += "/frozen-head"
		}
		b.Run(name, func(b *testing.B) {
			mlxtest.Run(b, func(t testing.TB) {
				c := wideVocabConfig(65_536)
				m, params := initModel(t, c, 3)
				defer mlx.Free(params...)
				m.Memory.LossChunk = bc.chunk
				B, T := 4, c.Context
				x, y := tokens(t, B, T, c.VocabSize, 2), tokens(t, B, T, c.VocabSize, 9)
				w := mlx.Ones([]int{B, T}, mlx.Float32)
				defer mlx.Free(x, y, w)
				step, free := compiledStep(t, adapterObjective(m, w, bc.frozen), len(params), trainable(m, bc.frozen))
				defer free()
				in := append(append([]*mlx.Array{}, params...), x, y)
				out, _ := peakOf(t, step, in) // traces
				mlx.Free(out...)
				if bc.limit { // MLX waits for queued work whenever it holds more than 1 byte
					defer mlx.SetMemoryLimit(mlx.SetMemoryLimit(1))
				}
				var peak uint64
				cpu0 := cpuSeconds(t)
				b.ResetTimer()
				for range b.N {
					out, p := peakOf(t, step, in)
					mlx.Free(out...)
					peak = max(peak, p)
				}
				b.ReportMetric(float64(peak)/(1<<20), "peak-MiB")
				b.ReportMetric((cpuSeconds(t)-cpu0)/float64(b.N), "cpu-s/op")
			})
		})
	}
}

// In bfloat16 (float32 master weights) the chunked loss follows the whole
// logits within bfloat16 rounding: the logits are computed in bfloat16
// either way and upcast, and the output projection's gradient, summed
// over the chunks in float32, is rounded once.
func TestChunkedLossInBFloat16(t *testing.T) {
	mlxtest.Run(t, func(t testing.TB) {
		c := smallConfig()
		c.PadVocabTo, c.Dtype, c.MasterFP32 = 64, "bfloat16", true
		m, params := initModel(t, c, 4)
		defer mlx.Free(params...)
		x, y := tokens(t, 2, 12, c.VocabSize, 5), tokens(t, 2, 12, c.VocabSize, 8)
		w := mlx.FromSlice([]float32{0, 0, 0, 1, 1, 1, 2, 2, 2, 1, 1, 1, 0, 1, 2, 1, 0, 1, 2, 1, 0, 1, 2, 1}, 2, 12)
		defer mlx.Free(x, y, w)
		wantLoss, wantGrads := lossAndGrads(t, weightedObjective(m, w), params, x, y)
		chunked := *m
		chunked.Memory.LossChunk = 5
		loss, grads := lossAndGrads(t, weightedObjective(&chunked, w), params, x, y)
		if math.Abs(loss-wantLoss) > 1e-2*wantLoss {
			t.Fatalf("loss %.5f in chunks of 5, %.5f whole", loss, wantLoss)
		}
		for i, g := range grads {
			scale := 1e-3
			for _, v := range wantGrads[i] {
				scale = math.Max(scale, math.Abs(v))
			}
			for j := range g {
				if d := math.Abs(g[j] - wantGrads[i][j]); d > 3e-2*scale {
					t.Fatalf("d loss/d %s[%d] = %g in chunks of 5, %g whole", m.Specs[i].Name, j, g[j], wantGrads[i][j])
				}
			}
		}
	})
}

// cpuSeconds is the user and system CPU time the process has used.
func cpuSeconds(t testing.TB) float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}
