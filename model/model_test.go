package model

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/internal/mlxtest"
	"github.com/posttrainllm/posttrainllm/mlx"
)

func smallConfig() Config {
	return Config{VocabSize: 61, DModel: 32, Layers: 2, Heads: 4, Context: 16}
}

func tokens(t testing.TB, b, n int, vocab int, seed int) *mlx.Array {
	t.Helper()
	v := make([]int32, b*n)
	for i := range v {
		v[i] = int32((i*7 + seed*13 + i*i) % vocab)
	}
	return mlx.FromSlice(v, b, n)
}

func TestSpecsNamesAndCount(t *testing.T) {
	m, err := New(smallConfig())
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, s := range m.Specs {
		if seen[s.Name] {
			t.Fatalf("duplicate parameter name %q", s.Name)
		}
		seen[s.Name] = true
	}
	for _, want := range []string{"tok_embeddings.weight", "blocks.1.attn.wq.weight", "blocks.0.mlp.w2.weight", "norm.weight", "output.weight"} {
		if !seen[want] {
			t.Errorf("missing parameter %q", want)
		}
	}
	c := m.Config
	d, h, v := c.DModel, c.Hidden(), c.VocabSize
	want := 2*v*d + d + c.Layers*(2*d+4*d*d+2*d*h)
	if got := c.NumParams(); got != want {
		t.Errorf("NumParams = %d, want %d", got, want)
	}
	tied := smallConfig()
	tied.TiedEmbeddings = true
	if got := tied.WithDefaults().NumParams(); got != want-v*d {
		t.Errorf("tied NumParams = %d, want %d", got, want-v*d)
	}
}

// ParamCount, computed from the shapes, agrees with the parameter list
// Specs builds, whatever the options that add or drop parameters.
func TestParamCountMatchesSpecs(t *testing.T) {
	for _, c := range []Config{
		smallConfig(),
		{VocabSize: 61, DModel: 32, Layers: 2, Heads: 4, Context: 16, EmbedNorm: true},
		{VocabSize: 61, DModel: 32, Layers: 3, Heads: 4, Context: 16, TiedEmbeddings: true, EmbedNorm: true},
		{VocabSize: 61, PadVocabTo: 64, DModel: 32, Layers: 1, Heads: 4, Context: 16, MLPRatio: 2.5},
	} {
		c = c.WithDefaults()
		n := 0
		for _, s := range c.Specs() {
			n += s.Size()
		}
		if got := c.ParamCount(); got != float64(n) || c.NumParams() != n {
			t.Errorf("%+v: ParamCount %g, NumParams %d; the specs hold %d", c, got, c.NumParams(), n)
		}
	}
}

func TestHugeShapeHas22MParams(t *testing.T) {
	c := Config{VocabSize: 50257, DModel: 256, Layers: 12, Heads: 8, Context: 512, TiedEmbeddings: true}.WithDefaults()
	n := c.NumParams()
	if n < 21_500_000 || n > 23_000_000 {
		t.Fatalf("huge config has %d parameters, want about 22M", n)
	}
}

func TestValidateRejectsBadConfigs(t *testing.T) {
	cases := map[string]func(*Config){
		"heads":     func(c *Config) { c.Heads = 0 },
		"divisible": func(c *Config) { c.Heads = 5 },
		"dtype":     func(c *Config) { c.Dtype = "int8" },
		"z_loss":    func(c *Config) { c.ZLoss = math.NaN() },
		"context":   func(c *Config) { c.Context = -1 },
	}
	for name, mutate := range cases {
		c := smallConfig()
		mutate(&c)
		if _, err := New(c); err == nil {
			t.Errorf("%s: New accepted %+v", name, c)
		}
	}
	if _, err := New(smallConfig()); err != nil {
		t.Fatalf("valid config rejected: %v", err)
	}
}

func TestInitialLossIsNearLnVocab(t *testing.T) {
	mlxtest.Run(t, func(t testing.TB) {
		m, _ := New(smallConfig())
		params, err := m.Init(1)
		if err != nil {
			t.Fatal(err)
		}
		defer mlx.Free(params...)
		loss, err := m.Loss(params, tokens(t, 2, 16, 61, 0), tokens(t, 2, 16, 61, 1)).Item()
		if err != nil {
			t.Fatal(err)
		}
		if want := math.Log(61); math.Abs(loss-want) > 0.3 {
			t.Fatalf("initial loss %.4f, want near ln(61) = %.4f", loss, want)
		}
	})
}

func TestInitIsSeeded(t *testing.T) {
	mlxtest.Run(t, func(t testing.TB) {
		m, _ := New(smallConfig())
		a, _ := m.Init(7)
		b, _ := m.Init(7)
		c, _ := m.Init(8)
		av, _ := a[2].Float32s()
		bv, _ := b[2].Float32s()
		cv, _ := c[2].Float32s()
		same, diff := true, false
		for i := range av {
			same = same && av[i] == bv[i]
			diff = diff || av[i] != cv[i]
		}
		if !same || !diff {
			t.Fatalf("init not seeded: same-seed equal=%v, other-seed differs=%v", same, diff)
		}
	})
}

// Changing a later token must not change logits at earlier positions.
func TestLogitsAreCausal(t *testing.T) {
	mlxtest.Run(t, func(t testing.TB) {
		m, _ := New(smallConfig())
		params, _ := m.Init(3)
		base := []int32{1, 2, 3, 4, 5, 6, 7, 8}
		alt := append([]int32(nil), base...)
		alt[5] = 40
		la, err := m.Logits(params, mlx.FromSlice(base, 1, 8)).Float32s()
		if err != nil {
			t.Fatal(err)
		}
		lb, _ := m.Logits(params, mlx.FromSlice(alt, 1, 8)).Float32s()
		v := m.Config.VocabSize
		for pos := 0; pos < 8; pos++ {
			changed := false
			for j := 0; j < v; j++ {
				if math.Abs(float64(la[pos*v+j]-lb[pos*v+j])) > 1e-5 {
					changed = true
				}
			}
			if pos < 5 && changed {
				t.Fatalf("logits at position %d changed when token 5 changed", pos)
			}
			if pos >= 5 && !changed {
				t.Fatalf("logits at position %d ignore token 5", pos)
			}
		}
	})
}

func TestBFloat16WithMasterWeights(t *testing.T) {
	mlxtest.Run(t, func(t testing.TB) {
		c := smallConfig()
		c.Dtype = "bfloat16"
		c.MasterFP32 = true
		c.ZLoss = 1e-4
		m, _ := New(c)
		params, _ := m.Init(1)
		if params[1].Dtype() != mlx.Float32 {
			t.Fatalf("master weights are %s, want float32", params[1].Dtype())
		}
		if got := m.Logits(params, tokens(t, 1, 8, 61, 0)).Dtype(); got != mlx.BFloat16 {
			t.Fatalf("logits dtype %s, want bfloat16", got)
		}
		vg, err := mlx.ValueAndGrad(func(in []*mlx.Array) ([]*mlx.Array, error) {
			return []*mlx.Array{m.Loss(in[:len(in)-2], in[len(in)-2], in[len(in)-1])}, nil
		}, 1)
		if err != nil {
			t.Fatal(err)
		}
		in := append(append([]*mlx.Array{}, params...), tokens(t, 1, 8, 61, 0), tokens(t, 1, 8, 61, 1))
		vals, grads, err := vg.Call(in...)
		if err != nil {
			t.Fatal(err)
		}
		if grads[0].Dtype() != mlx.Float32 {
			t.Fatalf("gradient of a float32 master is %s", grads[0].Dtype())
		}
		loss, _ := vals[0].Item()
		if math.IsNaN(loss) || math.Abs(loss-math.Log(61)) > 0.5 {
			t.Fatalf("bf16 loss %v, want near ln(61)", loss)
		}
		c.MasterFP32 = false
		m2, _ := New(c)
		p2, _ := m2.Init(1)
		if p2[1].Dtype() != mlx.BFloat16 {
			t.Fatalf("params without master weights are %s, want bfloat16", p2[1].Dtype())
		}
	})
}

func TestWrongParamCountIsAnError(t *testing.T) {
	mlxtest.Run(t, func(t testing.TB) {
		m, _ := New(smallConfig())
		params, _ := m.Init(1)
		err := m.Logits(params[:3], tokens(t, 1, 4, 61, 0)).Err()
		if err == nil || !strings.Contains(err.Error(), "parameter arrays") {
			t.Fatalf("want a parameter-count error, got %v", err)
		}
	})
}

func TestTokenAndTargetShapesAreChecked(t *testing.T) {
	mlxtest.Run(t, func(t testing.TB) {
		m, _ := New(smallConfig())
		params, _ := m.Init(1)
		err := m.Logits(params, mlx.FromSlice([]int32{1, 2, 3, 4}, 4)).Err()
		if err == nil || !strings.Contains(err.Error(), "[4]") || !strings.Contains(err.Error(), "[batch, time]") {
			t.Fatalf("1-D tokens: want an error naming the shape and [batch, time], got %v", err)
		}
		err = m.Loss(params, tokens(t, 2, 4, 61, 0), tokens(t, 4, 2, 61, 1)).Err()
		if err == nil || !strings.Contains(err.Error(), "[4 2]") || !strings.Contains(err.Error(), "[2 4]") {
			t.Fatalf("targets [4 2] for tokens [2 4]: want an error naming both shapes, got %v", err)
		}
		if got := m.Logits(params, tokens(t, 2, 4, 61, 0)).Shape(); !slices.Equal(got, []int{2, 4, m.Config.PaddedVocab()}) {
			t.Fatalf("logits shape %v, want [2 4 %d]", got, m.Config.PaddedVocab())
		}
	})
}
