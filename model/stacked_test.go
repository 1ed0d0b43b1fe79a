package model

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/internal/mlxtest"
	"github.com/posttrainllm/posttrainllm/mlx"
)

// Each layer's wq, wk and wv passed stacked in wq's slot (nil in the
// others) give the loss of the three passed apart, in every formulation,
// and the stacked array's gradient is the three gradients stacked.
func TestStackedQKVMatchesSeparate(t *testing.T) {
	for _, name := range []string{"tinygpt", "llama", "qwen3"} {
		c := familyConfigs()[name]
		mlxtest.Run(t, func(t testing.TB) {
			m, params := initModel(t, c, 5)
			defer mlx.Free(params...)
			x, y := tokens(t, 2, 12, c.VocabSize, 1), tokens(t, 2, 12, c.VocabSize, 6)
			triples := m.Config.QKVRuns()
			if len(triples) != c.Layers {
				t.Fatalf("%s: %d stacked triples, want one per layer (%d)", name, len(triples), c.Layers)
			}
			// units: the parameters with each triple as one stacked array;
			// expand puts them back in Specs' slots with nil for wk, wv.
			skip := map[int]bool{}
			stackAt := map[int][]int{}
			for _, tr := range triples {
				skip[tr[1]], skip[tr[2]] = true, true
				stackAt[tr[0]] = tr
			}
			var units []*mlx.Array
			var unitOf []int // the Specs index of each unit
			for i, p := range params {
				switch {
				case skip[i]:
					continue
				case stackAt[i] != nil:
					tr := stackAt[i]
					units = append(units, mlx.Concatenate([]*mlx.Array{params[tr[0]], params[tr[1]], params[tr[2]]}, 0))
				default:
					units = append(units, p)
				}
				unitOf = append(unitOf, i)
			}
			expand := func(u []*mlx.Array) []*mlx.Array {
				out := make([]*mlx.Array, len(params))
				for k, i := range unitOf {
					out[i] = u[k]
				}
				return out
			}
			for _, f := range []formulation{{}, formulationFor(mlx.GPU, m.Config)} {
				label := fmt.Sprintf("%s, %+v", name, f)
				wantLoss, wantGrads := lossAndGrads(t, func(p []*mlx.Array, x, y *mlx.Array) *mlx.Array {
					return m.loss(p, x, y, f)
				}, params, x, y)
				loss, grads := lossAndGrads(t, func(u []*mlx.Array, x, y *mlx.Array) *mlx.Array {
					return m.loss(expand(u), x, y, f)
				}, units, x, y)
				if math.Abs(loss-wantLoss) > 1e-6*wantLoss {
					t.Fatalf("%s: stacked loss %.7f, separate %.7f", label, loss, wantLoss)
				}
				for k, i := range unitOf {
					want := wantGrads[i]
					if tr := stackAt[i]; tr != nil {
						want = slices.Concat(wantGrads[tr[0]], wantGrads[tr[1]], wantGrads[tr[2]])
					}
					if len(grads[k]) != len(want) {
						t.Fatalf("%s: gradient of %s has %d values, want %d", label, m.Specs[i].Name, len(grads[k]), len(want))
					}
					for j := range want {
						if d := math.Abs(grads[k][j] - want[j]); d > 1e-6*(1e-3+math.Abs(want[j])) {
							t.Fatalf("%s: d loss/d %s[%d] = %g stacked, %g separate", label, m.Specs[i].Name, j, grads[k][j], want[j])
						}
					}
				}
			}
			// Generation (a pass with a cache) uses the stacked weight as
			// it is given (formulation.stackedGiven).
			cached := func(p []*mlx.Array) []float32 {
				cache := m.NewKVCache()
				defer cache.Free()
				out, err := m.LogitsCached(p, x, cache).Float32s()
				if err != nil {
					t.Fatal(err)
				}
				return out
			}
			got, want := cached(expand(units)), cached(params)
			for j := range want {
				if d := math.Abs(float64(got[j] - want[j])); d > 1e-5*(1+math.Abs(float64(want[j]))) {
					t.Fatalf("%s: cached logit %d = %g stacked, %g separate", name, j, got[j], want[j])
				}
			}
		})
	}
}

// Families whose q/k/v have biases have no stacked triples; a stacked
// array of the wrong shape, or a nil anywhere else, is an error.
func TestStackedQKVRefusals(t *testing.T) {
	for _, name := range []string{"gpt2", "qwen2", "llama3"} {
		if got := familyConfigs()[name].WithDefaults().QKVRuns(); got != nil {
			t.Errorf("%s (q/k/v biases): QKVRuns = %v, want nil", name, got)
		}
	}
	mlxtest.Run(t, func(t testing.TB) {
		c := familyConfigs()["tinygpt"]
		m, params := initModel(t, c, 5)
		defer mlx.Free(params...)
		x := tokens(t, 2, 8, c.VocabSize, 1)
		tr := m.Config.QKVRuns()[0]
		bad := slices.Clone(params)
		bad[tr[1]], bad[tr[2]] = nil, nil // wq alone, not stacked
		if err := m.Loss(bad, x, x).Err(); err == nil || !strings.Contains(err.Error(), "want the three stacked") {
			t.Errorf("unstacked wq with nil wk, wv: %v", err)
		}
		bad = slices.Clone(params)
		bad[tr[0]+3] = nil // wo
		if err := m.Loss(bad, x, x).Err(); err == nil || !strings.Contains(err.Error(), "1 parameter arrays are nil") {
			t.Errorf("nil wo: %v", err)
		}
	})
}

// initModel builds the model of c and its parameters initialised with
// seed; the caller frees the parameters.
func initModel(t testing.TB, c Config, seed uint64) (*Transformer, []*mlx.Array) {
	t.Helper()
	m, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	params, err := m.Init(seed)
	if err != nil {
		t.Fatal(err)
	}
	return m, params
}
