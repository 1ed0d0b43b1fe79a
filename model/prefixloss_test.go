package model

import (
	"math"
	"testing"

	"github.com/posttrainllm/posttrainllm/mlx"
)

// prefixFamilies are the model families PrefixLossTerms is checked on:
// rotary and learned positions, grouped keys and values, and Gemma 3's
// sliding-window layers with a window shorter than the rows.
var prefixFamilies = map[string]Config{
	"llama": {VocabSize: 61, DModel: 32, Layers: 2, Heads: 4, KVHeads: 2, Context: 32, MLP: "swiglu", InitStd: 0.4},
	"gpt2": {VocabSize: 61, DModel: 32, Layers: 2, Heads: 2, Context: 32, Norm: "layer", Bias: true,
		Positions: "learned", GELU: "tanh", InitStd: 0.4},
	"gemma3": {VocabSize: 61, DModel: 32, Layers: 3, Heads: 4, KVHeads: 1, HeadDimension: 16, Context: 32, MLPHidden: 40,
		MLP: "geglu", GELU: "tanh", QKNorm: true, PostNorms: true, EmbedScale: true, SlidingWindow: 4,
		SlidingPattern: 3, RoPEBase: 1e6, RoPELocalBase: 1e4, QueryScale: 16, InitStd: 0.4},
}

// PrefixLossTerms gives the terms and the gradients of rows laid out
// whole: two prompts of 5 and 3 tokens, two rows continuing each (rows
// 0 and 2 continue prompt 1, rows 1 and 3 prompt 0: groups need not be
// in order), a weighted loss over each row's targets.
func TestPrefixLossTermsMatchWholeRows(t *testing.T) {
	prompts := [][]int32{{7, 3, 9, 1, 4}, {2, 8, 5}}
	rows := []struct {
		group int
		cont  []int32 // the tokens after the prompt
	}{{1, []int32{11, 12, 13, 14}}, {0, []int32{20, 21, 22, 23}}, {1, []int32{30, 31, 32, 33}}, {0, []int32{40, 41, 42, 43}}}
	const C = 4 // each row: the prompt's last token and three continuation tokens as inputs
	S := 4      // the longest prompt less its last token
	for name, cfg := range prefixFamilies {
		t.Run(name, func(t *testing.T) {
			m, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			params, err := m.Init(3)
			if err != nil {
				t.Fatal(err)
			}
			B := len(rows)
			T := S + C // whole rows: prompt then continuation, padded with token 0
			promptIn := make([]int32, len(prompts)*S)
			for p, ids := range prompts {
				copy(promptIn[p*S:], ids[:len(ids)-1])
			}
			var x, y, start, group, wholeX, wholeY []int32
			var w, wholeW []float32
			for b, r := range rows {
				ids := prompts[r.group]
				seq := append(append([]int32{}, ids...), r.cont...) // len(prompt)+4 tokens
				x = append(x, seq[len(ids)-1:len(ids)-1+C]...)
				y = append(y, seq[len(ids):len(ids)+C]...)
				start = append(start, int32(len(ids)-1))
				group = append(group, int32(r.group))
				wx, wy, ww := make([]int32, T), make([]int32, T), make([]float32, T)
				copy(wx, seq[:len(seq)-1])
				copy(wy, seq[1:])
				for j := range C {
					wt := float32(1+b) * float32(j+1) / 10
					w = append(w, wt)
					ww[len(ids)-1+j] = wt
				}
				wholeX, wholeY, wholeW = append(wholeX, wx...), append(wholeY, wy...), append(wholeW, ww...)
			}
			arr := func(v []int32, shape ...int) *mlx.Array { return mlx.FromSlice(v, shape...) }
			pA, xA, yA := arr(promptIn, len(prompts), S), arr(x, B, C), arr(y, B, C)
			sA, gA, wA := arr(start, B), arr(group, B), mlx.FromSlice(w, B, C)
			wxA, wyA, wwA := arr(wholeX, B, T), arr(wholeY, B, T), mlx.FromSlice(wholeW, B, T)

			ce, lse := m.PrefixLossTerms(params, nil, pA, xA, yA, sA, gA)
			fullCE, fullLSE := m.LossTerms(params, wxA, wyA)
			got, gotL, full, fullL := values(t, ce), values(t, lse), values(t, fullCE), values(t, fullLSE)
			for b := range B {
				for j := range C {
					at := b*T + int(start[b]) + j
					if math.Abs(got[b*C+j]-full[at]) > 1e-4 || math.Abs(gotL[b*C+j]-fullL[at]) > 1e-4 {
						t.Fatalf("row %d, target %d: terms %.6f, %.6f; whole rows %.6f, %.6f", b, j, got[b*C+j], gotL[b*C+j], full[at], fullL[at])
					}
				}
			}

			viaPrefix := func(p []*mlx.Array, _, _ *mlx.Array) *mlx.Array {
				ce, _ := m.PrefixLossTerms(p, nil, pA, xA, yA, sA, gA)
				return mlx.Sum(mlx.Multiply(ce, wA))
			}
			viaRows := func(p []*mlx.Array, x, y *mlx.Array) *mlx.Array {
				ce, _ := m.LossTerms(p, x, y)
				return mlx.Sum(mlx.Multiply(ce, wwA))
			}
			sameLossAndGradients(t, m, params, viaPrefix, viaRows, wxA, wyA, 1e-4, 2e-4, "through the shared prompts", "over whole rows")
		})
	}
}
