package model

import (
	"fmt"
	"slices"
	"strings"

	"github.com/posttrainllm/posttrainllm/mlx"
)

// ProjectionGroups returns the projections of each transformer block of
// the layout specs (Config.Specs) that share their input and that the
// model computes with one matmul in its stacked formulation, as indices in
// specs: per block [wq, wk, wv], and for the gated MLPs (SwiGLU, GeGLU)
// [w1, w3]. A Linear with one
// of them as its Group computes the group together (Linear.Group), so
// that adapted projections keep the stacked formulation.
func ProjectionGroups(specs []ParamSpec) [][]int {
	index := make(map[string]int, len(specs))
	for i, s := range specs {
		index[s.Name] = i
	}
	var out [][]int
	for _, s := range specs {
		var members []string
		switch {
		case strings.HasSuffix(s.Name, ".attn.wq.weight"):
			p := strings.TrimSuffix(s.Name, "wq.weight")
			members = []string{p + "wq.weight", p + "wk.weight", p + "wv.weight"}
		case strings.HasSuffix(s.Name, ".mlp.w1.weight"): // w3 exists for the gated MLPs only
			p := strings.TrimSuffix(s.Name, "w1.weight")
			members = []string{p + "w1.weight", p + "w3.weight"}
		default:
			continue
		}
		g := make([]int, 0, len(members))
		for _, name := range members {
			if i, ok := index[name]; ok {
				g = append(g, i)
			}
		}
		if len(g) == len(members) {
			out = append(out, g)
		}
	}
	return out
}

// checkGroup refuses a Linear's Group that is none of ProjectionGroups.
func (m *Transformer) checkGroup(g []int) error {
	for _, want := range ProjectionGroups(m.Specs) {
		if slices.Equal(g, want) {
			return nil
		}
	}
	return fmt.Errorf("model: a Linear for the group of parameters %v, want one of ProjectionGroups (a block's wq, wk, wv or a gated MLP's w1, w3)", g)
}

// grouped returns the grouped Linear held for the group whose first weight
// is w (a block's wq or w1), if there is one.
func (p projections) grouped(w *mlx.Array) (Linear, bool) {
	l, ok := p.lin[w]
	return l, ok && w != nil && l.Group != nil
}

// stackedFor reports whether block b projects q, k and v with one matmul:
// by their grouped Linear, or by the stacked formulation (or weights given
// stacked, with stackedGiven) where none of the three has a Linear of its
// own.
func (f formulation) stackedFor(b block) bool {
	if _, ok := f.proj.grouped(b.wq); ok {
		return true
	}
	stacked := f.stackedProjections || f.stackedGiven && b.wqkv != nil
	return stacked && !f.proj.replaced(b.wq) && !f.proj.replaced(b.wk) && !f.proj.replaced(b.wv)
}
