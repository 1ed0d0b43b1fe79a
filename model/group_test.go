package model

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/internal/mlxtest"
	"github.com/posttrainllm/posttrainllm/mlx"
)

// TestProjectionGroupsNameTheirMembers: every block has a wq, wk, wv group
// and, for the gated MLPs (SwiGLU, GeGLU) only, a w1, w3 group, by the
// names in Specs.
func TestProjectionGroupsNameTheirMembers(t *testing.T) {
	for name, c := range familyConfigs() {
		specs := c.WithDefaults().Specs()
		groups := ProjectionGroups(specs)
		want := c.Layers
		if c.WithDefaults().gated() {
			want *= 2
		}
		if len(groups) != want {
			t.Fatalf("%s: %d groups, want %d", name, len(groups), want)
		}
		for _, g := range groups {
			var names []string
			for _, i := range g {
				names = append(names, specs[i].Name[strings.LastIndexByte(strings.TrimSuffix(specs[i].Name, ".weight"), '.')+1:])
			}
			if got := strings.Join(names, ","); got != "wq.weight,wk.weight,wv.weight" && got != "w1.weight,w3.weight" {
				t.Fatalf("%s: group %v is %s", name, g, got)
			}
		}
	}
}

// TestGroupedLinearsReplaceProjections computes every group of
// ProjectionGroups through one Linear that multiplies by its members'
// weights concatenated (passed as its arrays; the parameter slots hold
// placeholders): the loss equals the plain model's and each weight's
// gradient arrives at its array, in the plain and the stacked
// formulation, with and without gradient checkpointing.
func TestGroupedLinearsReplaceProjections(t *testing.T) {
	for name, c := range familyConfigs() {
		mlxtest.Run(t, func(t testing.TB) {
			for _, f := range []formulation{{}, {stackedProjections: true, writtenProjectionVJPs: true, addMMResidual: true}} {
				checkGroupedLinears(t, fmt.Sprintf("%s, stacked %v", name, f.stackedProjections), c, f)
			}
		})
	}
}

// checkGroupedLinears checks that grouped Linears over the weights of
// config c's model give its loss and gradients in formulation f, with
// and without gradient checkpointing.
func checkGroupedLinears(t testing.TB, label string, c Config, f formulation) {
	t.Helper()
	apply := func(x *mlx.Array, a []*mlx.Array) *mlx.Array {
		return mlx.Matmul(x, mlx.Transpose(mlx.Concatenate(a, 0)))
	}
	m, params := initModel(t, c, 7)
	defer mlx.Free(params...)
	x, y := tokens(t, 2, 12, c.VocabSize, 3), tokens(t, 2, 12, c.VocabSize, 4)
	wantLoss, wantGrads := lossAndGrads(t, meanTerms(m), params, x, y)
	groups := ProjectionGroups(m.Specs)
	n := len(params)
	in := slices.Clone(params)
	var idx []int
	for _, g := range groups {
		for _, i := range g {
			in[i] = mlx.Zeros([]int{1}, mlx.Float32)
			in = append(in, params[i])
			idx = append(idx, i)
		}
	}
	for _, mem := range []Memory{{}, {Checkpoint: true}} {
		mm := *m
		mm.Memory = mem
		loss, grads := lossAndGrads(t, func(p []*mlx.Array, x, y *mlx.Array) *mlx.Array {
			lin, pos := Linears{}, n
			for _, g := range groups {
				lin[g[0]] = Linear{Arrays: p[pos : pos+len(g)], Apply: apply, Group: g}
				pos += len(g)
			}
			f := f
			if err := mm.setLinears(&f, lin); err != nil {
				return mlx.ErrorArray(err)
			}
			ce, lse := mm.rowTerms(p[:n], x, y, f)
			return mlx.Add(mlx.Mean(ce), mlx.MulScalar(mlx.Mean(mlx.Square(lse)), 1e-2))
		}, in, x, y)
		for k, i := range idx {
			grads[i] = grads[n+k]
		}
		sameLossAndGrads(t, fmt.Sprintf("%s, %+v", label, mem), m, loss, wantLoss, grads[:n], wantGrads)
	}
}

// TestLinearsRefuseBadGroups: a group that is not one of ProjectionGroups,
// one held under another index than its first member, and one whose
// member also has a Linear of its own are refused.
func TestLinearsRefuseBadGroups(t *testing.T) {
	mlxtest.Run(t, func(t testing.TB) {
		m, params := initModel(t, familyConfigs()["llama"], 1)
		defer mlx.Free(params...)
		x := tokens(t, 1, 4, m.Config.VocabSize, 1)
		qkv := ProjectionGroups(m.Specs)[0]
		one := Linear{Arrays: []*mlx.Array{params[qkv[0]]}, Apply: func(x *mlx.Array, a []*mlx.Array) *mlx.Array {
			return mlx.Matmul(x, mlx.Transpose(a[0]))
		}}
		group := func(g []int) Linear { l := one; l.Group = g; return l }
		for label, lin := range map[string]Linears{
			"q and k only":      {qkv[0]: group(qkv[:2])},
			"held under wk":     {qkv[1]: group(qkv)},
			"wk with its own":   {qkv[0]: group(qkv), qkv[1]: one},
			"reordered members": {qkv[0]: group([]int{qkv[0], qkv[2], qkv[1]})},
		} {
			ce, _ := m.LossTermsWith(params, lin, x, x)
			if ce.Err() == nil {
				t.Fatalf("%s: no error", label)
			}
		}
	})
}
