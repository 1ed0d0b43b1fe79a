package optim

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/mlx"
)

// newAll builds every registered optimizer over params with cfg.
func newAll(t *testing.T, params []Param, cfg Config) []Optimizer {
	t.Helper()
	var out []Optimizer
	for _, name := range Names() {
		opt, err := New(name, params, cfg)
		if err != nil {
			t.Fatalf("New(%q): %v", name, err)
		}
		if opt.Name() != name {
			t.Fatalf("New(%q).Name() = %q", name, opt.Name())
		}
		out = append(out, opt)
	}
	return out
}

func TestNamesAreTheRegistry(t *testing.T) {
	want := []string{"adamw", "lion", "adafactor", "muon", "sgd", "galore", "sophia"}
	if got := Names(); !slices.Equal(got, want) {
		t.Fatalf("Names() = %v, want %v", got, want)
	}
	if _, err := New("adam", fixtureParams(), DefaultConfig()); err == nil || !strings.Contains(err.Error(), `"adam"`) {
		t.Fatalf(`New("adam") error = %v, want one naming "adam"`, err)
	}
}

func TestStateNamesMatchInit(t *testing.T) {
	onMLX(t, func() {
		cfg := DefaultConfig()
		cfg.Adafactor.Beta1 = 0.9 // adds the first-moment slots
		wantCount := map[string]int{
			"adamw":     1 + 2*4,
			"lion":      1 + 4,
			"adafactor": 1 + 2 + 2 + 2 + 1 + 4, // three factored params, one full, plus 4 first moments
			"muon":      1 + 2 + 2*2,           // two Matrix params, two AdamW params
			"sgd":       1 + 4,
			"galore":    1 + 2*4, // the default rank 128 projects none of the fixture's matrices
			"sophia":    1 + 2*4,
		}
		for _, opt := range newAll(t, fixtureParams(), cfg) {
			names := opt.StateNames()
			state, err := opt.Init()
			if err != nil {
				t.Fatalf("%s: Init: %v", opt.Name(), err)
			}
			if len(names) != len(state) || len(names) != wantCount[opt.Name()] {
				t.Fatalf("%s: %d state names, %d state arrays, want %d of each", opt.Name(), len(names), len(state), wantCount[opt.Name()])
			}
			seen := map[string]bool{}
			for j, n := range names {
				if seen[n] {
					t.Fatalf("%s: state name %q repeats: %v", opt.Name(), n, names)
				}
				seen[n] = true
				a := state[j]
				want := mlx.Float32
				if j == 0 {
					want = mlx.Int32
					if n != StepName || a.Ndim() != 0 {
						t.Fatalf("%s: state 0 is %q %s, want %q 0-D", opt.Name(), n, a, StepName)
					}
				}
				if a.Dtype() != want {
					t.Fatalf("%s: state %q is %s, want %s", opt.Name(), n, a, want)
				}
				if v := readData(t, a); slices.ContainsFunc(v, func(x float64) bool { return x != 0 }) {
					t.Fatalf("%s: initial state %q = %v, want zeros", opt.Name(), n, v)
				}
			}
			names[0] = "changed"
			if opt.StateNames()[0] != StepName {
				t.Fatalf("%s: StateNames returns its internal slice", opt.Name())
			}
		}
		if got := len(mustSGD(t, SGDConfig{}).StateNames()); got != 1 {
			t.Fatalf("SGD without momentum keeps %d state arrays, want 1 (the counter)", got)
		}
	})
}

func mustSGD(t *testing.T, cfg SGDConfig) *SGD {
	o, err := NewSGD(fixtureParams(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// TestWeightDecayMasking compares one update with weight decay to one
// without: parameters with Decay change, the others are bit-identical.
func TestWeightDecayMasking(t *testing.T) {
	onMLX(t, func() {
		with, without := DefaultConfig(), DefaultConfig()
		with.AdamW.WeightDecay, without.AdamW.WeightDecay = 0.5, 0
		with.Lion.WeightDecay, without.Lion.WeightDecay = 0.5, 0
		with.Adafactor.WeightDecay, without.Adafactor.WeightDecay = 0.5, 0
		with.Muon.WeightDecay, without.Muon.WeightDecay = 0.5, 0
		with.Muon.AdamW.WeightDecay, without.Muon.AdamW.WeightDecay = 0.5, 0
		with.SGD.WeightDecay, without.SGD.WeightDecay = 0.5, 0
		with.GaLore.AdamW.WeightDecay, without.GaLore.AdamW.WeightDecay = 0.5, 0
		with.Sophia.WeightDecay, without.Sophia.WeightDecay = 0.5, 0
		params := fixtureParams()
		ps := paramArrays(t, params, mlx.Float32)
		gs := gradArrays(t, params, 0, mlx.Float32)
		lr := mlx.Scalar(0.1, mlx.Float32)
		optsWith, optsWithout := newAll(t, params, with), newAll(t, params, without)
		for k := range optsWith {
			a, b := optsWith[k], optsWithout[k]
			sa, _ := a.Init()
			sb, _ := b.Init()
			pa, _, err := a.Update(ps, gs, sa, lr)
			if err != nil {
				t.Fatal(err)
			}
			pb, _, err := b.Update(ps, gs, sb, lr)
			if err != nil {
				t.Fatal(err)
			}
			for i, p := range params {
				d := maxAbsDiff(readData(t, pa[i]), readData(t, pb[i]))
				if p.Decay && d < 1e-4 {
					t.Fatalf("%s: param %q has Decay but weight decay changed it by only %g", a.Name(), p.Name, d)
				}
				if !p.Decay && d != 0 {
					t.Fatalf("%s: param %q has no Decay but weight decay changed it by %g", a.Name(), p.Name, d)
				}
			}
		}
	})
}

func TestBFloat16ParamsStayBFloat16(t *testing.T) {
	onMLX(t, func() {
		params := fixtureParams()
		ps16 := paramArrays(t, params, mlx.BFloat16)
		gs16 := gradArrays(t, params, 0, mlx.BFloat16)
		ps32 := make([]*mlx.Array, len(ps16))
		gs32 := make([]*mlx.Array, len(gs16))
		for i := range ps16 {
			ps32[i] = mlx.AsType(ps16[i], mlx.Float32)
			gs32[i] = mlx.AsType(gs16[i], mlx.Float32)
		}
		lr := mlx.Scalar(0.05, mlx.Float32)
		for _, opt := range newAll(t, params, DefaultConfig()) {
			state, _ := opt.Init()
			newPs, newState, err := opt.Update(ps16, gs16, state, lr)
			if err != nil {
				t.Fatalf("%s: %v", opt.Name(), err)
			}
			// The same update on the float32 copies of the bf16 inputs, rounded
			// to bf16, is what the bf16 update must give: computed in float32,
			// cast back once.
			refPs, _, err := opt.Update(ps32, gs32, state, lr)
			if err != nil {
				t.Fatal(err)
			}
			for i, p := range params {
				if newPs[i].Dtype() != mlx.BFloat16 {
					t.Fatalf("%s: param %q became %s, want bfloat16", opt.Name(), p.Name, newPs[i])
				}
				want := readData(t, mlx.AsType(refPs[i], mlx.BFloat16))
				assertClose(t, opt.Name()+" bf16 "+p.Name, readData(t, newPs[i]), want, 0)
				if d := maxAbsDiff(readData(t, newPs[i]), readData(t, ps16[i])); d == 0 {
					t.Fatalf("%s: bf16 param %q did not move", opt.Name(), p.Name)
				}
			}
			for j, a := range newState[1:] {
				if a.Dtype() != mlx.Float32 {
					t.Fatalf("%s: state %q is %s, want float32", opt.Name(), opt.StateNames()[j+1], a)
				}
			}
		}
	})
}

func TestUpdateRejectsBadArguments(t *testing.T) {
	onMLX(t, func() {
		params := fixtureParams()
		opt, err := NewAdamW(params, DefaultAdamWConfig())
		if err != nil {
			t.Fatal(err)
		}
		ps := paramArrays(t, params, mlx.Float32)
		gs := gradArrays(t, params, 0, mlx.Float32)
		state, _ := opt.Init()
		lr := mlx.Scalar(0.1, mlx.Float32)
		wrongShape := slices.Clone(gs)
		wrongShape[1] = mlx.Zeros([]int{2, 4}, mlx.Float32)
		cases := []struct {
			name            string
			ps, gs, state   []*mlx.Array
			lr              *mlx.Array
			wantErrContains string
		}{
			{"too few params", ps[:3], gs, state, lr, "got 3 params"},
			{"too few state", ps, gs, state[1:], lr, "state arrays"},
			{"grad shape", ps, wrongShape, state, lr, `grad of "v"`},
			{"lr not 0-D", ps, gs, state, mlx.FromSlice([]float32{0.1}), "0-D"},
			{"state order", ps, gs, append([]*mlx.Array{state[1]}, state[1:]...), lr, `state "step"`},
		}
		for _, c := range cases {
			_, _, err := opt.Update(c.ps, c.gs, c.state, c.lr)
			if err == nil || !strings.Contains(err.Error(), c.wantErrContains) {
				t.Fatalf("%s: error %v, want one containing %q", c.name, err, c.wantErrContains)
			}
		}
	})
}

func TestConstructorsRejectBadParams(t *testing.T) {
	cases := []struct {
		name   string
		params []Param
		want   string
	}{
		{"duplicate", []Param{{Name: "a", Shape: []int{2}}, {Name: "a", Shape: []int{3}}}, `both named "a"`},
		{"reserved", []Param{{Name: "step", Shape: []int{2}}}, `"step"`},
		{"empty name", []Param{{Shape: []int{2}}}, "empty name"},
		{"zero dim", []Param{{Name: "a", Shape: []int{2, 0}}}, "[2 0]"},
	}
	for _, c := range cases {
		for _, name := range Names() {
			_, err := New(name, c.params, DefaultConfig())
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("%s/%s: error %v, want one containing %q", c.name, name, err, c.want)
			}
		}
	}
	_, err := NewMuon([]Param{{Name: "conv", Shape: []int{2, 3, 4}, Matrix: true}}, DefaultMuonConfig())
	if err == nil || !strings.Contains(err.Error(), `"conv"`) || !strings.Contains(err.Error(), "[2 3 4]") {
		t.Fatalf("Muon with a 3-D Matrix param: error %v, want one naming it and its shape", err)
	}
}

func TestConstructorsRejectBadConfig(t *testing.T) {
	cases := []struct {
		opt    string
		change func(*Config)
		field  string
		value  string
	}{
		{"adamw", func(c *Config) { c.AdamW.Beta1 = 1 }, "Beta1", "1"},
		{"adamw", func(c *Config) { c.AdamW.Beta2 = -0.1 }, "Beta2", "-0.1"},
		{"adamw", func(c *Config) { c.AdamW.Eps = 0 }, "Eps", "0"},
		{"adamw", func(c *Config) { c.AdamW.WeightDecay = -1 }, "WeightDecay", "-1"},
		{"lion", func(c *Config) { c.Lion.Beta1 = 1.5 }, "Beta1", "1.5"},
		{"lion", func(c *Config) { c.Lion.Beta2 = -0.5 }, "Beta2", "-0.5"},
		{"lion", func(c *Config) { c.Lion.WeightDecay = -0.1 }, "WeightDecay", "-0.1"},
		{"adafactor", func(c *Config) { c.Adafactor.Eps1 = -1e-30 }, "Eps1", "-1e-30"},
		{"adafactor", func(c *Config) { c.Adafactor.Eps2 = -1 }, "Eps2", "-1"},
		{"adafactor", func(c *Config) { c.Adafactor.ClipThreshold = 0 }, "ClipThreshold", "0"},
		{"adafactor", func(c *Config) { c.Adafactor.DecayRate = 0.8 }, "DecayRate", "0.8"},
		{"adafactor", func(c *Config) { c.Adafactor.Beta1 = 1 }, "Beta1", "1"},
		{"adafactor", func(c *Config) { c.Adafactor.WeightDecay = -2 }, "WeightDecay", "-2"},
		{"muon", func(c *Config) { c.Muon.Momentum = 1 }, "Momentum", "1"},
		{"muon", func(c *Config) { c.Muon.NSSteps = 0 }, "NSSteps", "0"},
		{"muon", func(c *Config) { c.Muon.Eps = -1 }, "Eps", "-1"},
		{"muon", func(c *Config) { c.Muon.WeightDecay = -1 }, "WeightDecay", "-1"},
		{"muon", func(c *Config) { c.Muon.AdamW.Beta2 = 2 }, "AdamW: Beta2", "2"},
		{"muon", func(c *Config) { c.Muon.AdamWLRScale = 0 }, "AdamWLRScale", "0"},
		{"sgd", func(c *Config) { c.SGD.Momentum = -0.9 }, "Momentum", "-0.9"},
		{"sgd", func(c *Config) { c.SGD.WeightDecay = -1 }, "WeightDecay", "-1"},
		{"sgd", func(c *Config) { c.SGD.Momentum, c.SGD.Nesterov = 0, true }, "Nesterov", "0"},
	}
	for _, c := range cases {
		cfg := DefaultConfig()
		c.change(&cfg)
		_, err := New(c.opt, fixtureParams(), cfg)
		want := fmt.Sprintf("%s = %s", c.field, c.value)
		if c.field == "Nesterov" {
			want = "Momentum = 0"
		}
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), c.opt) {
			t.Fatalf("%s with %s = %s: error %v, want one naming %q", c.opt, c.field, c.value, err, want)
		}
	}
	for _, name := range Names() {
		if _, err := New(name, fixtureParams(), DefaultConfig()); err != nil {
			t.Fatalf("%s rejects its defaults: %v", name, err)
		}
	}
}
