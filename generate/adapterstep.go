package generate

import (
	"fmt"
	"slices"

	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
)

// adapterOf is the position of r's adapter in the stacked rows, −1 for
// the base.
func (b *batch) adapterOf(r *row) (int, error) {
	n, ok := b.adapters.lookup(r.job.seq.Adapter)
	if !ok {
		return 0, fmt.Errorf("adapter %q is not registered", r.job.seq.Adapter)
	}
	return n, nil
}

// repeatAdapter is r's adapter position n times, for the n positions of
// its chunk that a prefill pass projects as rows.
func (b *batch) repeatAdapter(idx []int, r *row, n int) ([]int, error) {
	a, err := b.adapterOf(r)
	if err != nil {
		return nil, err
	}
	for range n {
		idx = append(idx, a)
	}
	return idx, nil
}

// anyAdapter reports whether some row of idx has an adapter.
func anyAdapter(idx []int) bool {
	return slices.ContainsFunc(idx, func(n int) bool { return n >= 0 })
}

// linears returns the Linears that apply to each projected row of a
// prefill pass the adapter idx names for it (−1: the base), or nil when
// every row is the base's. Call on the MLX thread.
func (b *batch) linears(params []*mlx.Array, idx []int) (model.Linears, error) {
	if !anyAdapter(idx) {
		return nil, nil
	}
	rows := b.adapters.rows
	mask, index, err := rows.Select(idx)
	if err != nil {
		return nil, err
	}
	return rows.Linears(params, rows.Arrays(), mask, index), nil
}

// adapterInputs returns the extra inputs of an adapted decode step for
// slots naming adapters idx: the stacked arrays, the mask and the index
// (peft.Rows.Select). Call on the MLX thread.
func (b *batch) adapterInputs(idx []int) ([]*mlx.Array, error) {
	rows := b.adapters.rows
	mask, index, err := rows.Select(idx)
	if err != nil {
		return nil, err
	}
	return append(append([]*mlx.Array(nil), rows.Arrays()...), mask, index), nil
}

// decodeLinears is the Linears of an adapted decode step's trace: extra
// are its inputs after the sampling inputs (adapterInputs'), params the
// parameters it received.
func (b *batch) decodeLinears(params, extra []*mlx.Array) model.Linears {
	n := len(extra)
	return b.adapters.rows.Linears(params, extra[:n-2], extra[n-2], extra[n-1])
}
