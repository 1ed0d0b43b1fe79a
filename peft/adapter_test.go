package peft

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/internal/mlxtest"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
)

func tinyModel(t testing.TB) *model.Transformer {
	t.Helper()
	m, err := model.New(model.Config{VocabSize: 61, DModel: 16, Layers: 2, Heads: 2, Context: 8})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestNewSelectsTargetsByName(t *testing.T) {
	m := tinyModel(t)
	for _, tc := range []struct {
		targets []string
		want    []string // projection names adapted in each layer
	}{
		{[]string{"attn"}, []string{"wq", "wk", "wv", "wo"}},
		{[]string{"mlp"}, []string{"w1", "w2"}},
		{[]string{"wq", "wv"}, []string{"wq", "wv"}},
		{[]string{"all"}, []string{"wq", "wk", "wv", "wo", "w1", "w2"}},
	} {
		a, err := New(Config{Method: LoRA, Rank: 2, Alpha: 4, Targets: tc.targets}, m.Specs)
		if err != nil {
			t.Fatalf("%v: %v", tc.targets, err)
		}
		if got, want := len(a.Targets), len(tc.want)*m.Config.Layers; got != want {
			t.Fatalf("%v: %d targets, want %d", tc.targets, got, want)
		}
		for _, i := range a.Targets {
			if s := m.Specs[i]; s.Kind != model.Matrix || !slices.Contains(tc.want, projectionName(s.Name)) {
				t.Errorf("%v: adapted %s", tc.targets, s.Name)
			}
		}
		if len(a.Specs) != 2*len(a.Targets) {
			t.Errorf("%v: %d adapter arrays for %d targets, want 2 each", tc.targets, len(a.Specs), len(a.Targets))
		}
	}
	a, err := New(Config{Method: DoRA, Rank: 2, Alpha: 4, Targets: []string{"wo"}}, m.Specs)
	if err != nil {
		t.Fatal(err)
	}
	names := strings.Join(a.Names(), " ")
	want := "blocks.0.attn.wo.lora_A blocks.0.attn.wo.lora_B blocks.0.attn.wo.magnitude " +
		"blocks.1.attn.wo.lora_A blocks.1.attn.wo.lora_B blocks.1.attn.wo.magnitude"
	if names != want {
		t.Errorf("DoRA names %q, want %q", names, want)
	}
	d := m.Config.DModel
	if got := a.NumParams(); got != 2*(2*d+d*2+d) {
		t.Errorf("NumParams = %d, want %d", got, 2*(2*d+d*2+d))
	}
}

func TestNewRefusesBadConfigs(t *testing.T) {
	m := tinyModel(t)
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Method: "qlora", Rank: 2, Alpha: 1, Targets: []string{"attn"}}, `method "qlora"`},
		{Config{Method: LoRA, Rank: 0, Alpha: 1, Targets: []string{"attn"}}, "rank 0"},
		{Config{Method: LoRA, Rank: 2, Alpha: math.NaN(), Targets: []string{"attn"}}, "alpha NaN"},
		{Config{Method: LoRA, Rank: 2, Alpha: 1}, "no targets"},
		{Config{Method: LoRA, Rank: 2, Alpha: 1, Targets: []string{"attn", "mpl"}}, "target mpl selects no matrix"},
		{Config{Method: LoRA, Rank: 17, Alpha: 1, Targets: []string{"wq"}}, "rank 17 exceeds"},
	} {
		_, err := New(tc.cfg, m.Specs)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one containing %q", tc.cfg, err, tc.want)
		}
	}
}

// randomize replaces every adapter array by a random one of its shape, so
// that B·A is not zero.
func randomize(t testing.TB, a *Adapter, seed uint64) []*mlx.Array {
	t.Helper()
	keys := mlx.RandomSplit(mlx.RandomKey(seed), len(a.Specs))
	out := make([]*mlx.Array, len(a.Specs))
	for i, s := range a.Specs {
		out[i] = mlx.RandomNormal(s.Shape, mlx.Float32, 1, 0.5, keys[i])
	}
	if err := mlx.Eval(out...); err != nil {
		t.Fatal(err)
	}
	return out
}

func floats(t testing.TB, a *mlx.Array) []float32 {
	t.Helper()
	v, err := mlx.ToSlice[float32](mlx.AsType(a, mlx.Float32))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// matmulScaled computes W0 + s·B·A on the host.
func matmulScaled(w0, b, a []float32, out, in, r int, s float64) []float64 {
	w := make([]float64, out*in)
	for o := 0; o < out; o++ {
		for i := 0; i < in; i++ {
			acc := 0.0
			for k := 0; k < r; k++ {
				acc += float64(b[o*r+k]) * float64(a[k*in+i])
			}
			w[o*in+i] = float64(w0[o*in+i]) + s*acc
		}
	}
	return w
}

func TestEffectiveMatchesHandComputedWeights(t *testing.T) {
	m := tinyModel(t)
	for _, method := range Methods() {
		a, err := New(Config{Method: method, Rank: 3, Alpha: 6, Targets: []string{"wk", "w2"}}, m.Specs)
		if err != nil {
			t.Fatal(err)
		}
		mlxtest.Run(t, func(t testing.TB) {
			base, err := m.Init(1)
			if err != nil {
				t.Fatal(err)
			}
			ad := randomize(t, a, 2)
			eff := a.Effective(base, ad)
			k := a.perTarget()
			for j, i := range a.Targets {
				out, in := m.Specs[i].Shape[0], m.Specs[i].Shape[1]
				want := matmulScaled(floats(t, base[i]), floats(t, ad[j*k+1]), floats(t, ad[j*k]), out, in, 3, 2)
				if method == DoRA {
					mag := floats(t, ad[j*k+2])
					for o := 0; o < out; o++ {
						norm := 0.0
						for c := 0; c < in; c++ {
							norm += want[o*in+c] * want[o*in+c]
						}
						norm = math.Sqrt(norm)
						for c := 0; c < in; c++ {
							want[o*in+c] *= float64(mag[o]) / norm
						}
					}
				}
				got := floats(t, eff[i])
				for e := range got {
					if math.Abs(float64(got[e])-want[e]) > 1e-4*(1+math.Abs(want[e])) {
						t.Fatalf("%s %s[%d] = %g, want %g", method, m.Specs[i].Name, e, got[e], want[e])
					}
				}
			}
			for i := range base {
				if !slices.Contains(a.Targets, i) && eff[i] != base[i] {
					t.Errorf("%s: untouched %s is not the base array", method, m.Specs[i].Name)
				}
			}
		})
	}
}

// A fresh adapter computes what the base computes: B is zero and, for
// DoRA, the magnitude is the base's row norm.
func TestFreshAdapterLeavesModelUnchanged(t *testing.T) {
	m := tinyModel(t)
	for _, method := range Methods() {
		a, err := New(Config{Method: method, Rank: 4, Alpha: 8, Targets: []string{"all"}}, m.Specs)
		if err != nil {
			t.Fatal(err)
		}
		mlxtest.Run(t, func(t testing.TB) {
			base, err := m.Init(3)
			if err != nil {
				t.Fatal(err)
			}
			ad, err := a.Init(4, base)
			if err != nil {
				t.Fatal(err)
			}
			x := mlx.FromSlice([]int32{1, 5, 9, 2, 60, 7, 3, 3}, 1, 8)
			want, got := floats(t, m.Logits(base, x)), floats(t, m.Logits(a.Effective(base, ad), x))
			for i := range want {
				if d := math.Abs(float64(got[i] - want[i])); d > 1e-5 || (method == LoRA && d != 0) {
					t.Fatalf("%s: logit %d = %g with a fresh adapter, %g without", method, i, got[i], want[i])
				}
			}
		})
	}
}

// The fused weights compute exactly the logits of base plus adapter: the
// complaint users of other trainers have most often about fusing.
func TestFusedLogitsEqualAdapterLogits(t *testing.T) {
	for _, dtype := range []string{"float32", "bfloat16"} {
		cfg := model.Config{VocabSize: 61, DModel: 16, Layers: 2, Heads: 2, Context: 8, Dtype: dtype}
		m, err := model.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, method := range Methods() {
			a, err := New(Config{Method: method, Rank: 2, Alpha: 16, Targets: []string{"attn", "mlp"}}, m.Specs)
			if err != nil {
				t.Fatal(err)
			}
			mlxtest.Run(t, func(t testing.TB) {
				base, err := m.Init(5)
				if err != nil {
					t.Fatal(err)
				}
				ad := randomize(t, a, 6)
				fused, err := a.Fuse(base, ad)
				if err != nil {
					t.Fatal(err)
				}
				for i, f := range fused {
					if f.Dtype() != base[i].Dtype() || !slices.Equal(f.Shape(), base[i].Shape()) {
						t.Fatalf("fused %s is %v, base %v", m.Specs[i].Name, f, base[i])
					}
				}
				x := mlx.FromSlice([]int32{4, 8, 15, 16, 23, 42, 0, 1}, 1, 8)
				adapted, plain := floats(t, m.Logits(a.Effective(base, ad), x)), floats(t, m.Logits(fused, x))
				orig := floats(t, m.Logits(base, x))
				if slices.Equal(adapted, orig) {
					t.Fatalf("%s %s: the adapter does not change the logits; the test would prove nothing", dtype, method)
				}
				if !slices.Equal(adapted, plain) {
					t.Errorf("%s %s: fused logits differ from base + adapter logits", dtype, method)
				}
				mlx.Free(fused...)
			})
		}
	}
}
