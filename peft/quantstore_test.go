package peft

import (
	"slices"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
)

// A quantized frozen list saved under Names reads back through
// QuantizedFromNamed as the same layout and arrays; a float list reads
// back as nothing quantized; mixed bits, a quantized norm gain and a
// missing biases array are refused, naming what is wrong. The token
// embedding is among the quantized slots.
func TestQuantizedFromNamedReadsNamesBack(t *testing.T) {
	m := quantModel(t)
	base := mustInit(t, m)
	defer mlx.Free(base...)
	q, frozen, err := QuantizeBase(m.Specs, base, 32, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer freeQuantized(q, frozen)
	named := map[string]*mlx.Array{}
	for i, n := range q.Names() {
		named[n] = frozen[i]
	}
	got, list, err := QuantizedFromNamed("ck", m.Specs, named)
	if err != nil || got == nil {
		t.Fatalf("QuantizedFromNamed: %v, %v", got, err)
	}
	if got.Bits != 4 || got.GroupSize != 32 || len(got.Indices) != len(q.Indices) || len(list) != len(frozen) {
		t.Fatalf("read back %s with %d slots and %d arrays, want %s with %d and %d", got, len(got.Indices), len(list), q, len(q.Indices), len(frozen))
	}
	if !slices.Contains(got.Indices, 0) || m.Specs[0].Name != model.TokenEmbeddingName {
		t.Fatalf("quantized slots %v, want the token embedding (0) among them", got.Indices)
	}
	for i := range list {
		if list[i] != frozen[i] {
			t.Fatalf("array %d (%s) is not the saved one", i, q.Names()[i])
		}
	}
	floatNamed := map[string]*mlx.Array{}
	for i, s := range m.Specs {
		floatNamed[s.Name] = base[i]
	}
	if q, list, err := QuantizedFromNamed("ck", m.Specs, floatNamed); q != nil || list != nil || err != nil {
		t.Errorf("a float list: %v, %d arrays, %v; want nothing quantized", q, len(list), err)
	}
	stem := QuantStem(m.Specs[q.Indices[1]].Name)
	mlx.Run(func() []*mlx.Array {
		w8, s8, b8 := mlx.Quantize(base[q.Indices[1]], 32, 8)
		mixed := clone(named)
		mixed[stem+".weight"], mixed[stem+ScalesSuffix], mixed[stem+BiasesSuffix] = w8, s8, b8
		if _, _, err := QuantizedFromNamed("ck", m.Specs, mixed); err == nil || !strings.Contains(err.Error(), "8-bit") {
			t.Errorf("one 8-bit slot among 4-bit ones: %v, want a refusal naming it", err)
		}
		norm := clone(named)
		ni := slices.IndexFunc(m.Specs, func(s model.ParamSpec) bool { return s.Kind == model.Norm })
		ns := QuantStem(m.Specs[ni].Name)
		norm[m.Specs[ni].Name], norm[ns+ScalesSuffix], norm[ns+BiasesSuffix] = mlx.Quantize(mlx.Reshape(base[ni], 1, base[ni].Dim(0)), 32, 4)
		if _, _, err := QuantizedFromNamed("ck", m.Specs, norm); err == nil || !strings.Contains(err.Error(), m.Specs[ni].Name) {
			t.Errorf("a quantized norm gain: %v, want a refusal naming it", err)
		}
		return nil
	})
	missing := clone(named)
	delete(missing, stem+BiasesSuffix)
	if _, _, err := QuantizedFromNamed("ck", m.Specs, missing); err == nil || !strings.Contains(err.Error(), stem+BiasesSuffix) {
		t.Errorf("a slot without biases: %v, want a refusal naming them", err)
	}
}

func clone(m map[string]*mlx.Array) map[string]*mlx.Array {
	out := make(map[string]*mlx.Array, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// freeQuantized frees what QuantizeBase made.
func freeQuantized(q *Quantized, frozen []*mlx.Array) {
	for _, i := range q.Indices {
		frozen[i].Free()
	}
	mlx.Free(frozen[len(q.Base):]...)
}
