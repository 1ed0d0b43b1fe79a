package peft

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/internal/mlxtest"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
)

// groupModels are the layouts the grouped Linears must handle: SwiGLU with
// grouped-query attention (w1/w3 and q/k/v groups, KV heads < heads), q/k/v
// biases (Qwen2), and per-head QK-norm (Qwen3).
func groupModels(t testing.TB) map[string]*model.Transformer {
	t.Helper()
	base := model.Config{VocabSize: 61, DModel: 64, Layers: 2, Heads: 4, KVHeads: 2, Context: 8,
		MLPHidden: 128, Norm: model.NormRMS, MLP: model.MLPSwiGLU}
	bias, qkNorm := base, base
	bias.QKVBias = true
	qkNorm.QKNorm = true
	out := map[string]*model.Transformer{}
	for name, c := range map[string]model.Config{"swiglu-gqa": base, "qkv-bias": bias, "qk-norm": qkNorm} {
		m, err := model.New(c)
		if err != nil {
			t.Fatal(err)
		}
		out[name] = m
	}
	return out
}

// TestGroupedEqualsPerProjection: Linears groups the adapted q/k/v and
// w1/w3 of every block, and the loss through the grouped Linears and its
// gradients with respect to every adapter array equal those through
// ProjectionLinears (one Linear per projection), for LoRA and DoRA over a
// float and a 4-bit base.
func TestGroupedEqualsPerProjection(t *testing.T) {
	x, y := testTokens()
	for name, m := range groupModels(t) {
		for _, method := range Methods() {
			for _, bits := range []int{0, 4} {
				label := fmt.Sprintf("%s, %s, bits %d", name, method, bits)
				mlxtest.Run(t, func(t testing.TB) {
					a, frozen, ad := groupSetup(t, m, method, bits, []string{"all"})
					lin, _, err := a.Linears(frozen, ad) // what training uses
					if err != nil {
						t.Fatal(err)
					}
					if got, want := countGroups(lin), 2*m.Config.Layers; got != want {
						t.Fatalf("%s: %d grouped Linears, want %d (q/k/v and w1/w3 per block)", label, got, want)
					}
					loss := func(linears func(b, ad []*mlx.Array) (model.Linears, []*mlx.Array, error)) func(b, ad []*mlx.Array) *mlx.Array {
						return func(b, ad []*mlx.Array) *mlx.Array {
							lin, params, err := linears(b, ad)
							if err != nil {
								return mlx.ErrorArray(err)
							}
							ce, _ := m.LossTermsWith(params, lin, x, y)
							return mlx.Mean(ce)
						}
					}
					wantLoss, wantGrads := adapterLossAndGrads(t, loss(a.ProjectionLinears), frozen, ad)
					got, grads := adapterLossAndGrads(t, loss(a.GroupedLinears), frozen, ad)
					if math.Abs(got-wantLoss) > 1e-5*wantLoss {
						t.Fatalf("%s: grouped loss %.7f, per projection %.7f", label, got, wantLoss)
					}
					closeGrads(t, label, a, grads, wantGrads, 1e-4)
				})
			}
		}
	}
}

// TestPartialGroupsFallBack: with only some projections of a group
// adapted (wq and wv, w3 without w1) GroupedLinears groups none of them and
// computes what ProjectionLinears computes.
func TestPartialGroupsFallBack(t *testing.T) {
	m := groupModels(t)["swiglu-gqa"]
	mlxtest.Run(t, func(t testing.TB) {
		a, frozen, ad := groupSetup(t, m, DoRA, 0, []string{"wq", "wv", "w3"})
		lin, _, err := a.GroupedLinears(frozen, ad)
		if err != nil {
			t.Fatal(err)
		}
		if n := countGroups(lin); n != 0 {
			t.Fatalf("%d grouped Linears for partly adapted groups, want 0", n)
		}
		if len(lin) != len(a.Targets) {
			t.Fatalf("%d Linears, want one per target (%d)", len(lin), len(a.Targets))
		}
	})
}

// TestGroupedStepHasFewerOps: the gradient graph of a LoRA step through
// grouped Linears has fewer operations than through one Linear per
// projection (the count is deterministic: it is the graph, not a timing).
func TestGroupedStepHasFewerOps(t *testing.T) {
	m := groupModels(t)["swiglu-gqa"]
	x, _ := testTokens()
	mlxtest.Run(t, func(t testing.TB) {
		a, frozen, ad := groupSetup(t, m, LoRA, 0, []string{"all"})
		count := func(linears func(b, ad []*mlx.Array) (model.Linears, []*mlx.Array, error)) int {
			vg := adapterValueAndGrad(t, m, linears, len(ad), x)
			defer vg.Free()
			vals, grads, err := vg.Call(append(append([]*mlx.Array{}, ad...), frozen...)...)
			if err != nil {
				t.Fatal(err)
			}
			ops, err := mlx.GraphOps(append(vals, grads...)...)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, c := range ops {
				n += c
			}
			return n
		}
		grouped, perProjection := count(a.GroupedLinears), count(a.ProjectionLinears)
		if grouped >= perProjection {
			t.Fatalf("grouped step: %d graph ops, per projection %d; want fewer", grouped, perProjection)
		}
		t.Logf("graph ops of a LoRA step: grouped %d, per projection %d", grouped, perProjection)
	})
}

// adapterValueAndGrad is the value and gradient, with respect to the
// first nAd inputs (the adapter arrays; the frozen base follows them), of
// the mean next-token loss of m over x through the Linears that linears
// builds.
func adapterValueAndGrad(t testing.TB, m *model.Transformer, linears func(b, ad []*mlx.Array) (model.Linears, []*mlx.Array, error),
	nAd int, x *mlx.Array) *mlx.ValueAndGradFunc {
	t.Helper()
	vg, err := mlx.ValueAndGrad(func(in []*mlx.Array) ([]*mlx.Array, error) {
		lin, params, err := linears(in[nAd:], in[:nAd])
		if err != nil {
			return nil, err
		}
		ce, _ := m.LossTermsWith(params, lin, x, x)
		return []*mlx.Array{mlx.Mean(ce)}, nil
	}, argnums(nAd)...)
	if err != nil {
		t.Fatal(err)
	}
	return vg
}

// groupSetup returns an adapter on m's targets, its frozen base (quantized
// to bits when not 0) and small random adapter arrays.
func groupSetup(t testing.TB, m *model.Transformer, method Method, bits int, targets []string) (*Adapter, []*mlx.Array, []*mlx.Array) {
	t.Helper()
	a, err := New(Config{Method: method, Rank: 4, Alpha: 8, Targets: targets}, m.Specs)
	if err != nil {
		t.Fatal(err)
	}
	frozen, err := m.Init(3)
	if err != nil {
		t.Fatal(err)
	}
	if bits > 0 {
		if a.Quant, frozen, err = QuantizeBase(m.Specs, frozen, 32, bits); err != nil {
			t.Fatal(err)
		}
	}
	return a, frozen, small(t, randomize(t, a, 2))
}

// countGroups counts the grouped Linears of lin.
func countGroups(lin model.Linears) int {
	n := 0
	for _, l := range lin {
		if l.Group != nil {
			n++
		}
	}
	return n
}

// argnums is 0…n−1.
func argnums(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// TestGroupedBFloat16 runs the grouped Linears as a bfloat16 step does
// (frozen base and adapter copies in bfloat16): their output stays
// bfloat16, and the loss is the per-projection one to bfloat16 rounding.
func TestGroupedBFloat16(t *testing.T) {
	m := groupModels(t)["swiglu-gqa"]
	x, y := testTokens()
	for _, method := range Methods() {
		mlxtest.Run(t, func(t testing.TB) {
			a, frozen, ad := groupSetup(t, m, method, 0, []string{"all"})
			cast := func(in []*mlx.Array) []*mlx.Array {
				out := make([]*mlx.Array, len(in))
				for i, v := range in {
					out[i] = mlx.AsType(v, mlx.BFloat16)
				}
				return out
			}
			frozen, ad = cast(frozen), cast(ad)
			lin, params, err := a.GroupedLinears(frozen, ad)
			if err != nil {
				t.Fatal(err)
			}
			g := model.ProjectionGroups(m.Specs)[0]
			rows := mlx.AsType(mlx.Ones([]int{3, m.Config.DModel}, mlx.Float32), mlx.BFloat16)
			if out := lin[g[0]].Apply(rows, lin[g[0]].Arrays); out.Dtype() != mlx.BFloat16 {
				t.Fatalf("%s: grouped Linear's output is %v for bfloat16 rows, want bfloat16", method, out.Dtype())
			}
			loss := func(lin model.Linears, params []*mlx.Array) float64 {
				ce, _ := m.LossTermsWith(params, lin, x, y)
				v, err := mlx.Mean(mlx.AsType(ce, mlx.Float32)).Item()
				if err != nil {
					t.Fatal(err)
				}
				return v
			}
			plin, pparams, err := a.ProjectionLinears(frozen, ad)
			if err != nil {
				t.Fatal(err)
			}
			got, want := loss(lin, params), loss(plin, pparams)
			if math.Abs(got-want) > 2e-2*want {
				t.Fatalf("%s: bfloat16 grouped loss %.5f, per projection %.5f", method, got, want)
			}
		})
	}
}

// TestGroupedStepKeepsNoStackedBase: a compiled LoRA value and gradient
// through grouped Linears peaks no higher than through one Linear per
// projection by more than half the stacked bases' size (a group's copy
// lives until its product has run, and MLX queues ahead), on a model whose
// frozen weights are most of its memory: the stacked copy of a group's
// bases must not live from the forward pass to the backward one (it
// held one per group, 0.33 GB on SmolLM2-135M in float32).
func TestGroupedStepKeepsNoStackedBase(t *testing.T) {
	m := weightHeavyModel(t)
	x, _ := testTokens()
	mlxtest.Run(t, func(t testing.TB) {
		a, frozen, ad := groupSetup(t, m, LoRA, 0, []string{"all"})
		perProjection := compiledStepPeak(t, m, a.ProjectionLinears, frozen, ad, x)
		grouped := compiledStepPeak(t, m, a.GroupedLinears, frozen, ad, x)
		var stacked uint64
		for _, i := range a.Targets {
			if n := a.Base[i].Name; !strings.HasSuffix(n, "wo.weight") && !strings.HasSuffix(n, "w2.weight") {
				stacked += uint64(4 * a.Base[i].Shape[0] * a.Base[i].Shape[1])
			}
		}
		t.Logf("peak: grouped %d, per projection %d bytes; stacked bases %d bytes", grouped, perProjection, stacked)
		if grouped > perProjection+stacked/2 {
			t.Fatalf("grouped step peaks at %d bytes, per projection %d: %d more, the stacked bases being %d", grouped, perProjection, grouped-perProjection, stacked)
		}
	})
}

// compiledStepPeak is MLX's peak memory over the second call (the first
// traces and compiles) of a compiled value and gradient of m's mean
// cross-entropy on x with respect to the adapter arrays ad, through the
// Linears that linears builds over the frozen list.
func compiledStepPeak(t testing.TB, m *model.Transformer, linears func(b, ad []*mlx.Array) (model.Linears, []*mlx.Array, error),
	frozen, ad []*mlx.Array, x *mlx.Array) uint64 {
	t.Helper()
	vg := adapterValueAndGrad(t, m, linears, len(ad), x)
	defer vg.Free()
	step, err := mlx.Compile(func(in []*mlx.Array) ([]*mlx.Array, error) {
		vals, grads, err := vg.Call(in...)
		return append(vals, grads...), err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer step.Free()
	in := append(append([]*mlx.Array{}, ad...), frozen...)
	for range 2 {
		mlx.ResetPeakMemory()
		out, err := step.Call(in...)
		if err != nil {
			t.Fatal(err)
		}
		if err := mlx.Eval(out...); err != nil {
			t.Fatal(err)
		}
		mlx.Free(out...)
	}
	return mlx.Memory().Peak
}

// weightHeavyModel is a SwiGLU model with grouped-query attention whose
// frozen weights are most of a step's memory, for the peak-memory tests.
func weightHeavyModel(t testing.TB) *model.Transformer { return swigluModel(t, 4, 256, 1024) }
