package peft

import (
	"fmt"
	"math"
	"slices"

	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
)

// group is one set of adapted projections that share their input and
// that Linears computes as one model.Linear (model.ProjectionGroups):
// members are the indices of the projections in Base, pos their
// positions in Targets.
type group struct {
	members, pos []int
}

// groups returns the groups of model.ProjectionGroups whose projections
// are all adapted and either all quantized or all float; projections
// outside them keep a Linear each.
func (a *Adapter) groups() []group {
	pos := make(map[int]int, len(a.Targets))
	for j, i := range a.Targets {
		pos[i] = j
	}
	var out []group
	for _, g := range model.ProjectionGroups(a.Base) {
		gr := group{members: g}
		quantized := 0
		for _, i := range g {
			j, ok := pos[i]
			if !ok {
				break
			}
			gr.pos = append(gr.pos, j)
			if a.Quant != nil && slices.Contains(a.Quant.Indices, i) {
				quantized++
			}
		}
		if len(gr.pos) == len(g) && (quantized == 0 || quantized == len(g)) {
			out = append(out, gr)
		}
	}
	return out
}

// regroup replaces, in lin, the Linears of each group's members by the
// one grouped Linear linear builds for the group, held at its first
// member.
func (a *Adapter) regroup(lin model.Linears, linear func(group) model.Linear) {
	for _, g := range a.groups() {
		for _, i := range g.members {
			delete(lin, i)
		}
		lin[g.members[0]] = linear(g)
	}
}

// stackRows is arrays off, off+stride, … (n of them) concatenated on rows:
// one kind of array of every member of a group, members laid out stride
// arrays apart.
func stackRows(arrays []*mlx.Array, off, stride, n int) *mlx.Array {
	parts := make([]*mlx.Array, 0, n)
	for m := range n {
		parts = append(parts, arrays[m*stride+off])
	}
	return mlx.Concatenate(parts, 0)
}

// groupBase is the frozen half of a group's Linear: the members' base
// arrays (nb per member: [W], or [packed, scales, biases] for a quantized
// base, whose members share bits and group size), their output widths,
// and the products of one member's arrays (x·Wᵀ and g·W).
type groupBase struct {
	arrays            []*mlx.Array
	nb                int
	outs              []int
	product, productT func(*mlx.Array, []*mlx.Array) *mlx.Array
}

// groupBase returns the frozen half of g's Linear over the frozen list.
func (a *Adapter) groupBase(g group, base []*mlx.Array) groupBase {
	gb := groupBase{nb: 1, outs: make([]int, len(g.members)), product: plainMatmul, productT: plainMatmulT}
	quantized := a.Quant != nil && slices.Contains(a.Quant.Indices, g.members[0])
	if quantized {
		gb.nb = 3
	}
	rows := 0
	for n, i := range g.members {
		gb.outs[n] = a.Base[i].Shape[0]
		rows += gb.outs[n]
		if !quantized {
			gb.arrays = append(gb.arrays, base[i])
			continue
		}
		sc, b := a.Quant.extras(base, slices.Index(a.Quant.Indices, i))
		gb.arrays = append(gb.arrays, base[i], sc, b)
	}
	if quantized { // the stacked weight decides: rows × the members' common input width
		cols := a.Base[g.members[0]].Shape[1]
		gb.product, gb.productT = a.Quant.products(rows, cols, gb.arrays[1].Dtype(), a.DequantizedProducts)
	}
	return gb
}

// stack returns the members' base arrays b stacked on rows: [W0] or
// [packed, scales, biases].
func (gb groupBase) stack(b []*mlx.Array) []*mlx.Array {
	w0 := make([]*mlx.Array, gb.nb)
	for off := range gb.nb {
		w0[off] = stackRows(b, off, gb.nb, len(gb.outs))
	}
	return w0
}

// apply is x·[W0₁; W0₂; …]ᵀ over the members' base arrays b
// (stackedProduct).
func (gb groupBase) apply(x *mlx.Array, b []*mlx.Array) *mlx.Array {
	return stackedProduct(x, b, gb.nb, gb.outs, gb.stack, gb.product, gb.productT)
}

// groupLinear is the model.Linear of the adapted projections of g,
// computing their outputs concatenated along the last axis with one base
// product and one low-rank product: for LoRA
//
//	y = x·[W0₁; W0₂; …]ᵀ + (x·[A₁; A₂; …]ᵀ)·(s·diag(B₁, B₂, …))ᵀ
//
// where diag(B₁, B₂, …) is block-diagonal, formed as the rows of the Bs
// side by side, masked. For DoRA the sum is scaled by the concatenated
// row scales m/‖W0 + s·B·A‖, whose merged matrix is the stacked one
// W0 + s·diag(B)·A. The frozen bases are concatenated per call
// (groupBase). base is the frozen list, adapter the adapter arrays.
func (a *Adapter) groupLinear(g group, base, adapter []*mlx.Array) model.Linear {
	k := a.perTarget()
	gb := a.groupBase(g, base)
	arrays := slices.Clone(gb.arrays)
	for _, j := range g.pos {
		arrays = append(arrays, adapter[j*k:(j+1)*k]...)
	}
	rank, scale := a.Config.Rank, a.Config.Scale()
	dora := a.Config.Method == DoRA
	members, quantized := len(g.members), gb.nb == 3
	return model.Linear{Arrays: arrays, Group: slices.Clone(g.members), Apply: func(x *mlx.Array, arr []*mlx.Array) *mlx.Array {
		b, ad := arr[:members*gb.nb], arr[members*gb.nb:]
		stack := func(off int) *mlx.Array { return stackRows(ad, off, k, members) } // adapter array off of every member
		y0 := gb.apply(x, b)
		A := stack(0)                                                           // [members·r, in]
		bt := mlx.Transpose(stack(1))                                           // [r, out]
		tiled := mlx.Concatenate(slices.Repeat([]*mlx.Array{bt}, members), 0)   // [members·r, out]
		bdT := mlx.Multiply(tiled, blockMask(gb.outs, rank, scale, bt.Dtype())) // s·diag(B)ᵀ
		h := mlx.Matmul(mlx.AsType(x, A.Dtype()), mlx.Transpose(A))
		var y *mlx.Array
		if x.Dtype() == A.Dtype() {
			y = mlx.AddMM(y0, h, bdT, 1, 1)
		} else {
			y = mlx.Add(y0, mlx.AsType(mlx.Matmul(h, bdT), x.Dtype()))
		}
		if !dora {
			return y
		}
		w0 := gb.stack(b)
		var wf *mlx.Array
		if quantized {
			wf = a.Quant.dequantize(w0)
		} else {
			wf = w0[0]
		}
		w := mlx.Add(mlx.AsType(wf, mlx.Float32), mlx.Matmul(mlx.Transpose(bdT), A))
		gain := mlx.AsType(mlx.Divide(stack(2), rowNorm(w)), x.Dtype())
		return mlx.Multiply(y, gain)
	}}
}

// stackedProduct is x·W0ᵀ for W0 the group's frozen bases stacked on
// rows (stack(base), then product), with a written gradient for x alone:
// Σ g_n·W_n over the members (productT of each member's columns of g
// against its own base, parts arrays each, outs[n] columns). Differentiated
// through, the product would keep every group's stacked copy from the
// forward pass to the backward one, a second copy of the adapted
// projections' weights held by every microbatch (0.33 GB more at the peak
// of a float32 SmolLM2-135M LoRA step); stacking again in the backward
// pass would not help either, as compiling merges the two identical
// stackings into one. The bases are frozen: their cotangents are zeros
// that nothing reads.
func stackedProduct(x *mlx.Array, base []*mlx.Array, parts int, outs []int, stack func([]*mlx.Array) []*mlx.Array,
	product, productT func(*mlx.Array, []*mlx.Array) *mlx.Array) *mlx.Array {
	return frozenProduct("stacked base product", x, base, func(x *mlx.Array, base []*mlx.Array) *mlx.Array {
		return product(x, stack(base))
	}, func(g *mlx.Array, base []*mlx.Array) *mlx.Array {
		rows := g.Dim(0)
		var dx *mlx.Array
		col := 0
		for n, out := range outs {
			gn := mlx.Slice(g, []int{0, col}, []int{rows, col + out})
			term := productT(gn, base[n*parts:(n+1)*parts])
			if dx == nil {
				dx = term
			} else {
				dx = mlx.Add(dx, term)
			}
			col += out
		}
		return dx
	})
}

// frozenProduct is forward(x, frozen) with a written gradient for x alone,
// dx(g, frozen) of its cotangent g; the frozen arrays' cotangents are
// zeros that nothing reads. what names the product in errors.
func frozenProduct(what string, x *mlx.Array, frozen []*mlx.Array,
	forward, dx func(*mlx.Array, []*mlx.Array) *mlx.Array) *mlx.Array {
	fn, err := mlx.CustomVJP(func(in []*mlx.Array) ([]*mlx.Array, error) {
		return []*mlx.Array{forward(in[0], in[1:])}, nil
	}, func(primals, cot, _ []*mlx.Array) ([]*mlx.Array, error) {
		out := []*mlx.Array{dx(cot[0], primals[1:])}
		for _, b := range primals[1:] {
			out = append(out, mlx.ZerosLike(b))
		}
		return out, nil
	})
	if err != nil {
		return mlx.ErrorArray(fmt.Errorf("peft: %s: %w", what, err))
	}
	defer fn.Free() // the traced graph holds what its backward pass needs
	out, err := fn.Call(append([]*mlx.Array{x}, frozen...)...)
	if err != nil {
		return mlx.ErrorArray(fmt.Errorf("peft: %s: %w", what, err))
	}
	return out[0]
}

// blockMask is the [len(outs)·r, Σouts] mask in dtype that keeps, of the
// Bᵀs tiled along the rows, block n's rows n·r…(n+1)·r in the columns of
// projection n (outs[n] of them), scaled by s, and zeroes the rest. It is
// built in the adapters' dtype (float32, or bfloat16 for a bfloat16 step)
// so that the graph holds a constant rather than a cast of one.
func blockMask(outs []int, r int, s float64, dtype mlx.Dtype) *mlx.Array {
	total := 0
	for _, o := range outs {
		total += o
	}
	rows := len(outs) * r
	m := make([]float32, rows*total)
	col := 0
	for n, o := range outs {
		for row := n * r; row < (n+1)*r; row++ {
			for c := col; c < col+o; c++ {
				m[row*total+c] = float32(s)
			}
		}
		col += o
	}
	switch dtype {
	case mlx.Float32:
		return mlx.FromSlice(m, rows, total)
	case mlx.BFloat16:
		b := make([]byte, 2*len(m))
		for i, v := range m {
			h := bfloat16Bits(v)
			b[2*i], b[2*i+1] = byte(h), byte(h>>8)
		}
		return mlx.FromBytes(b, dtype, rows, total)
	}
	return mlx.AsType(mlx.FromSlice(m, rows, total), dtype)
}

// bfloat16Bits rounds v to bfloat16 (to nearest, ties to even, as MLX
// casts) and returns its bits.
func bfloat16Bits(v float32) uint16 {
	u := math.Float32bits(v)
	return uint16((u + 0x7FFF + (u>>16)&1) >> 16)
}
