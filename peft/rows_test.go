package peft

import (
	"math"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/internal/mlxtest"
	"github.com/posttrainllm/posttrainllm/mlx"
)

// TestRowsApplyEachRowsAdapter runs one forward pass over four rows, the
// first of the base and the others of three adapters (LoRA of two ranks
// and targets, DoRA), through Rows' Linears: each row's logits are those
// of its adapter merged into the weights (float32 rounding apart), and
// the base row's are those of the base over the same rows to the bit.
func TestRowsApplyEachRowsAdapter(t *testing.T) {
	m := swigluModel(t, 2, 32, 64)
	mlxtest.Run(t, func(t testing.TB) {
		base, err := m.Init(5)
		if err != nil {
			t.Fatal(err)
		}
		defer mlx.Free(base...)
		cfgs := []Config{
			{Method: LoRA, Rank: 4, Alpha: 8, Targets: []string{"wq", "wv"}},
			{Method: LoRA, Rank: 2, Alpha: 2, Targets: []string{"all"}},
			{Method: DoRA, Rank: 3, Alpha: 6, Targets: []string{"mlp", "wo"}},
		}
		var adapters []*Adapter
		var params [][]*mlx.Array
		for i, c := range cfgs {
			a, err := New(c, m.Specs)
			if err != nil {
				t.Fatal(err)
			}
			adapters, params = append(adapters, a), append(params, small(t, randomize(t, a, uint64(7+i))))
		}
		rows, err := NewRows(base, adapters, params)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Free()
		if rows.Adapters() != 3 || !rows.DoRA() || !strings.Contains(rows.Layout(), "d") {
			t.Fatalf("rows of %d adapters, DoRA %v, layout %q", rows.Adapters(), rows.DoRA(), rows.Layout())
		}
		const R, T = 4, 8
		ids := make([]int32, R*T)
		for i := range ids {
			ids[i] = int32((i*13 + 5) % 61)
		}
		tokens := mlx.FromSlice(ids, R, T)
		var which []int
		for r := range R {
			for range T {
				which = append(which, r-1)
			}
		}
		mask, index, err := rows.Select(which)
		if err != nil {
			t.Fatal(err)
		}
		got := floats(t, m.LogitsWith(base, rows.Linears(base, rows.Arrays(), mask, index), tokens))
		V := len(got) / (R * T)
		plainAll := floats(t, m.Logits(base, tokens))
		for i := range T * V {
			if got[i] != plainAll[i] {
				t.Fatalf("the base row's logit %d is %g, the base's over the same rows %g", i, got[i], plainAll[i])
			}
		}
		for r := range R {
			weights := base
			if r > 0 {
				weights = adapters[r-1].Effective(base, params[r-1])
			}
			want := floats(t, m.Logits(weights, mlx.Slice(tokens, []int{r, 0}, []int{r + 1, T})))
			worst, scale := 0.0, 0.0
			for i, w := range want {
				g := got[r*T*V+i]
				if math.IsInf(float64(w), 0) { // the padded vocabulary's rows
					if g != w {
						t.Fatalf("row %d: logit %d is %g, want %g", r, i, g, w)
					}
					continue
				}
				worst, scale = max(worst, math.Abs(float64(g-w))), max(scale, math.Abs(float64(w)))
			}
			if worst > 1e-5*scale {
				t.Fatalf("row %d (adapter %d): logits differ from the merged adapter's by up to %g (largest %g)", r, r-1, worst, scale)
			}
			if r > 0 {
				plain := floats(t, m.Logits(base, mlx.Slice(tokens, []int{r, 0}, []int{r + 1, T})))
				moved := 0.0
				for i, w := range want {
					if !math.IsInf(float64(w), 0) {
						moved = max(moved, math.Abs(float64(w-plain[i])))
					}
				}
				if moved < 1e-3*scale {
					t.Fatalf("adapter %d moves the logits by %g only: the comparison shows nothing", r-1, moved)
				}
			}
		}
		if _, _, err := rows.Select([]int{3}); err == nil {
			t.Fatal("Select accepted adapter 3 of 3")
		}
		q := *adapters[0]
		q.Quant = &Quantized{Bits: 4, GroupSize: 32}
		if _, err := NewRows(base, []*Adapter{&q}, params[:1]); err == nil || !strings.Contains(err.Error(), "quantized base") {
			t.Fatalf("NewRows over a quantized base: %v", err)
		}
		if _, err := NewRows(base, adapters, params[:2]); err == nil {
			t.Fatal("NewRows accepted 3 adapters with 2 lists of arrays")
		}
	})
}
