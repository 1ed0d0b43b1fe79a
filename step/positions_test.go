package step

import (
	"math"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/internal/mlxtest"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/optim"
)

// A rows step's per-position inputs reach the loss as [B, T] slices of
// their microbatch, follow the batch from update to update without a new
// trace, and give the loss a host computation of the same formula gives:
// Σ rowWeight · Σ_t mask·position·CE over the update, the row weights
// divided by their total.
func TestPositionInputsReachTheLoss(t *testing.T) {
	mlxtest.Run(t, func(t testing.TB) {
		const N, B, T, vocab = 2, 2, 4, 16
		m, err := model.New(model.Config{VocabSize: vocab, DModel: 16, Layers: 1, Heads: 2, Context: T})
		if err != nil {
			t.Fatal(err)
		}
		specs := make([]optim.Param, len(m.Specs))
		for i, s := range m.Specs {
			specs[i] = optim.Param{Name: s.Name, Shape: s.Shape}
		}
		opt, err := optim.New("sgd", specs, optim.DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		loss := func(trainable, _ []*mlx.Array, mb Microbatch) (*mlx.Array, []*mlx.Array) {
			ce, _ := m.LossTerms(trainable, mb.X, mb.Y)
			perRow := mlx.Sum(mlx.Multiply(mlx.Multiply(ce, mb.W), mb.Positions[0]), -1)
			return mlx.Sum(mlx.Multiply(perRow, mb.Rows[0])), nil
		}
		layout := Layout{Trainable: len(m.Specs), State: len(opt.StateNames()), Inputs: RowInputs, PositionInputs: 1}
		upd, err := NewStep(loss, opt, layout, StepOptions{Accum: N, Compile: true})
		if err != nil {
			t.Fatal(err)
		}
		defer upd.Free()
		params, err := m.Init(1)
		if err != nil {
			t.Fatal(err)
		}
		// The reference's copy of the parameters: the state takes its own.
		ref := make([]*mlx.Array, len(params))
		for i, p := range params {
			ref[i] = mlx.Copy(p)
		}
		defer mlx.Free(ref...)
		optState, err := opt.Init()
		if err != nil {
			t.Fatal(err)
		}
		st, err := NewState(upd, params, optState)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Free()

		n := N * B * T
		x, y, mask := make([]int32, n), make([]int32, n), make([]float32, n)
		for i := range x {
			x[i], y[i], mask[i] = int32(i*5%vocab), int32((i*5+3)%vocab), float32(i%3%2)
		}
		rowW := []float32{1, 0, 2, 1}
		ce, _ := m.LossTerms(ref, mlx.FromSlice(x, N*B, T), mlx.FromSlice(y, N*B, T))
		hostCE, err := ce.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		for round, scale := range []float32{1, -0.5} {
			pos := make([]float32, n)
			for i := range pos {
				pos[i] = scale * float32(1+i%4)
			}
			want := 0.0
			for r := range N * B {
				s := 0.0
				for j := range T {
					k := r*T + j
					s += float64(mask[k]) * float64(pos[k]) * float64(hostCE[k])
				}
				want += float64(rowW[r]) / 4 * s
			}
			got, err := st.Update(0, Batch{X: x, Y: y, W: mask, RowW: rowW, PositionInputs: [][]float32{pos}, N: N, B: B, T: T})
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(got-want) > 1e-4*math.Max(1, math.Abs(want)) {
				t.Errorf("round %d: loss %.6f, host %.6f", round, got, want)
			}
		}
		if upd.Traces() != 1 {
			t.Errorf("traced %d times over 2 updates, want 1", upd.Traces())
		}
		if _, err := st.Update(0, Batch{X: x, Y: y, W: mask, RowW: rowW, N: N, B: B, T: T}); err == nil || !strings.Contains(err.Error(), "position inputs") {
			t.Errorf("a batch without its position inputs: %v", err)
		}
	})
}
