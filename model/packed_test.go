package model

import (
	"fmt"
	"math"
	"testing"

	"github.com/posttrainllm/posttrainllm/internal/mlxtest"
	"github.com/posttrainllm/posttrainllm/mlx"
)

// TestPackedEqualsUnpacked packs examples of different lengths into rows
// and checks, for every family (learned and rotary positions), that each
// position's cross-entropy and logsumexp equal those of its example run
// alone, and that the loss over the packed rows has the gradients of the
// same loss summed over the examples run one by one.
func TestPackedEqualsUnpacked(t *testing.T) {
	const B, T = 2, 12
	lengths := [B][]int{{5, 7}, {4, 3, 5}}
	for name, c := range familyConfigs() {
		mlxtest.Run(t, func(t testing.TB) {
			m, params := initModel(t, c, 9)
			defer mlx.Free(params...)
			xs, ys := tokens(t, B, T, c.VocabSize, 4), tokens(t, B, T, c.VocabSize, 8)
			xv, err := xs.Int32s()
			if err != nil {
				t.Fatal(err)
			}
			yv, err := ys.Int32s()
			if err != nil {
				t.Fatal(err)
			}
			seg := make([]int32, B*T)
			type span struct{ row, start, n int }
			var spans []span
			for r := range B {
				start := 0
				for k, n := range lengths[r] {
					for i := start; i < start+n; i++ {
						seg[r*T+i] = int32(k)
					}
					spans = append(spans, span{r, start, n})
					start += n
				}
			}
			segs := mlx.FromSlice(seg, B, T)
			ce, lse := m.PackedLossTerms(params, nil, xs, ys, segs)
			cev, lsev := values(t, ce), values(t, lse)
			for _, s := range spans {
				x := mlx.FromSlice(xv[s.row*T+s.start:s.row*T+s.start+s.n], 1, s.n)
				y := mlx.FromSlice(yv[s.row*T+s.start:s.row*T+s.start+s.n], 1, s.n)
				wce, wlse := m.LossTerms(params, x, y)
				a, b := values(t, wce), values(t, wlse)
				for i := range s.n {
					p := s.row*T + s.start + i
					if math.Abs(cev[p]-a[i]) > 1e-4 || math.Abs(lsev[p]-b[i]) > 1e-4 {
						t.Fatalf("%s: row %d position %d: packed ce %g lse %g, alone %g %g", name, s.row, s.start+i, cev[p], lsev[p], a[i], b[i])
					}
				}
			}
			// Without the segments the rows attend across examples: different terms.
			plain, _ := m.LossTerms(params, xs, ys)
			pv := values(t, plain)
			if math.Abs(pv[T-1]-cev[T-1]) < 1e-6 {
				t.Fatalf("%s: the last position's loss is the same with and without document masking", name)
			}
			wantLoss, wantGrads := lossAndGrads(t, func(p []*mlx.Array, _, _ *mlx.Array) *mlx.Array {
				var sum *mlx.Array
				for _, s := range spans {
					x := mlx.FromSlice(xv[s.row*T+s.start:s.row*T+s.start+s.n], 1, s.n)
					y := mlx.FromSlice(yv[s.row*T+s.start:s.row*T+s.start+s.n], 1, s.n)
					ce, _ := m.LossTerms(p, x, y)
					if sum == nil {
						sum = mlx.Sum(ce)
					} else {
						sum = mlx.Add(sum, mlx.Sum(ce))
					}
				}
				return sum
			}, params, xs, ys)
			for _, mem := range []Memory{{}, {Checkpoint: true, LossChunk: 7}} {
				mm := *m
				mm.Memory = mem
				loss, grads := lossAndGrads(t, func(p []*mlx.Array, x, y *mlx.Array) *mlx.Array {
					ce, _ := mm.PackedLossTerms(p, nil, x, y, segs)
					return mlx.Sum(ce)
				}, params, xs, ys)
				sameLossAndGrads(t, fmt.Sprintf("%s packed, %+v", name, mem), m, loss, wantLoss, grads, wantGrads)
			}
		})
	}
}
