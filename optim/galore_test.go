package optim

import (
	"math"
	"testing"

	"github.com/posttrainllm/posttrainllm/mlx"
)

// refGaLore is GaLore in float64 for one parameter, with the projection
// the optimizer starts from: the first r columns of the identity.
func refGaLore(c GaLoreConfig, t int, lr float64, prm Param, p, g []float64, st map[string][]float64) {
	m, n, r := prm.Shape[0], prm.Shape[1], c.Rank
	left := m <= n
	d := n
	if left {
		d = m
	}
	proj := refSlot(st, prm.Name+".galore_proj", d*r)
	for k := range r {
		proj[k*r+k] = 1
	}
	pr := func(i, a int) float64 { return proj[i*r+a] }
	var rows, cols int // shape of the projected gradient
	if left {
		rows, cols = r, n
	} else {
		rows, cols = m, r
	}
	R := make([]float64, rows*cols)
	for a := range rows {
		for b := range cols {
			s := 0.0
			if left { // R = Pᵀ·G
				for i := range m {
					s += pr(i, a) * g[i*n+b]
				}
			} else { // R = G·P
				for j := range n {
					s += g[a*n+j] * pr(j, b)
				}
			}
			R[a*cols+b] = s
		}
	}
	mm := refSlot(st, prm.Name+".adam_m", len(R))
	vv := refSlot(st, prm.Name+".adam_v", len(R))
	bc1 := 1 - math.Pow(c.AdamW.Beta1, float64(t))
	bc2 := 1 - math.Pow(c.AdamW.Beta2, float64(t))
	N := make([]float64, len(R))
	for k := range R {
		mm[k] = c.AdamW.Beta1*mm[k] + (1-c.AdamW.Beta1)*R[k]
		vv[k] = c.AdamW.Beta2*vv[k] + (1-c.AdamW.Beta2)*R[k]*R[k]
		N[k] = (mm[k] / bc1) / (math.Sqrt(vv[k]/bc2) + c.AdamW.Eps)
	}
	for i := range m {
		for j := range n {
			back := 0.0
			for a := range r {
				if left { // P·N
					back += pr(i, a) * N[a*cols+j]
				} else { // N·Pᵀ
					back += N[i*cols+a] * pr(j, a)
				}
			}
			if prm.Decay {
				p[i*n+j] -= lr * c.AdamW.WeightDecay * p[i*n+j]
			}
			p[i*n+j] -= c.Scale * lr * back
		}
	}
}

// galoreReference runs refGaLore on the projected matrices and AdamW on
// the rest, as GaLore decides.
func galoreReference(cfg GaLoreConfig) refOptimizer {
	return func(step int, lr float64, params []Param, p, g [][]float64, st map[string][]float64) {
		for i, prm := range params {
			if prm.Matrix && min(prm.Shape[0], prm.Shape[1]) >= cfg.Rank {
				refGaLore(cfg, step, lr, prm, p[i], g[i], st)
			} else {
				refAdamW(cfg.AdamW, step, lr, prm.Name, prm.Decay, p[i], g[i], st)
			}
		}
	}
}

// With the identity as projection (rank = the smaller side) and scale 1,
// GaLore's update is AdamW's.
func TestGaLoreIdentityIsAdamW(t *testing.T) {
	cfg := DefaultGaLoreConfig()
	cfg.AdamW.WeightDecay = 0.5
	cfg.Rank, cfg.Scale = 2, 1 // both fixture matrices have a side of 2
	opt, err := NewGaLore(fixtureParams(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkAgainstReference(t, opt, fixtureParams(), func(step int, lr float64, params []Param, p, g [][]float64, st map[string][]float64) {
		for i, prm := range params {
			if prm.Matrix {
				refSlot(st, prm.Name+".galore_proj", 4)
				copy(st[prm.Name+".galore_proj"], []float64{1, 0, 0, 1})
			}
			refAdamW(cfg.AdamW, step, lr, prm.Name, prm.Decay, p[i], g[i], st)
		}
	})
}

// A rank-1 projection from each side, scaled, against the update written
// out by hand.
func TestGaLoreMatchesReference(t *testing.T) {
	cfg := DefaultGaLoreConfig()
	cfg.AdamW.WeightDecay = 0.5
	cfg.Rank, cfg.Scale = 1, 0.25
	opt, err := NewGaLore(fixtureParams(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkAgainstReference(t, opt, fixtureParams(), galoreReference(cfg))
}

// The optimizer state of a projected [m, n] matrix (m <= n) is 2rn + mr
// floats against AdamW's 2mn: the moments shrink by r/m.
func TestGaLoreStateShrinks(t *testing.T) {
	params := []Param{{Name: "w", Shape: []int{64, 256}, Matrix: true}, {Name: "t", Shape: []int{96, 32}, Matrix: true}, {Name: "b", Shape: []int{256}}}
	cfg := DefaultGaLoreConfig()
	cfg.Rank = 8
	g, err := NewGaLore(params, cfg)
	if err != nil {
		t.Fatal(err)
	}
	a, err := NewAdamW(params, DefaultAdamWConfig())
	if err != nil {
		t.Fatal(err)
	}
	onMLX(t, func() {
		count := func(o Optimizer) map[string]int {
			st, err := o.Init()
			if err != nil {
				t.Fatal(err)
			}
			defer mlx.Free(st...)
			out := map[string]int{}
			for j, name := range o.StateNames() {
				out[name] = numel(st[j].Shape())
			}
			return out
		}
		gs, as := count(g), count(a)
		want := map[string]int{
			"step": 1,
			// w [64, 256], projected from the left: P [64, 8], moments [8, 256].
			"w.galore_proj": 64 * 8, "w.adam_m": 8 * 256, "w.adam_v": 8 * 256,
			// t [96, 32], projected from the right: P [32, 8], moments [96, 8].
			"t.galore_proj": 32 * 8, "t.adam_m": 96 * 8, "t.adam_v": 96 * 8,
			"b.adam_m": 256, "b.adam_v": 256,
		}
		if len(gs) != len(want) {
			t.Fatalf("GaLore state %v, want %v", gs, want)
		}
		for name, n := range want {
			if gs[name] != n {
				t.Errorf("GaLore state %s has %d floats, want %d", name, gs[name], n)
			}
		}
		if got, want := float64(gs["w.adam_m"])/float64(as["w.adam_m"]), 8.0/64; got != want {
			t.Errorf("w's moments are %g of AdamW's, want r/m = %g", got, want)
		}
		if got, want := float64(gs["t.adam_v"])/float64(as["t.adam_v"]), 8.0/32; got != want {
			t.Errorf("t's moments are %g of AdamW's, want r/n = %g", got, want)
		}
	})
}

// Refresh sets each projection to the top singular vectors of the
// gradient: a gradient of rank r is then reproduced by P·Pᵀ·G.
func TestGaLoreRefreshSpansGradient(t *testing.T) {
	params := []Param{{Name: "w", Shape: []int{4, 6}, Matrix: true}, {Name: "t", Shape: []int{6, 4}, Matrix: true}}
	cfg := DefaultGaLoreConfig()
	cfg.Rank = 2
	opt, err := NewGaLore(params, cfg)
	if err != nil {
		t.Fatal(err)
	}
	onMLX(t, func() {
		state, err := opt.Init()
		if err != nil {
			t.Fatal(err)
		}
		// Rank-2 gradients: outer products u1 v1ᵀ + u2 v2ᵀ.
		rank2 := func(m, n int) []float64 {
			out := make([]float64, m*n)
			for i := range m {
				for j := range n {
					out[i*n+j] = math.Sin(float64(i+1))*math.Cos(float64(2*j+1)) + 0.5*float64(i%3)*float64(j%2+1)
				}
			}
			return out
		}
		gw, gt := rank2(4, 6), rank2(6, 4)
		grads := []*mlx.Array{fromData(t, gw, []int{4, 6}, mlx.Float32), fromData(t, gt, []int{6, 4}, mlx.Float32)}
		fresh, err := opt.Refresh(grads, state)
		if err != nil {
			t.Fatal(err)
		}
		replaced := opt.Replaced(state, fresh)
		if len(replaced) != 2 {
			t.Fatalf("Refresh replaced %d arrays, want the 2 projections", len(replaced))
		}
		for j, name := range opt.StateNames() {
			if !sameShape(fresh[j].Shape(), state[j].Shape()) || fresh[j].Dtype() != state[j].Dtype() {
				t.Fatalf("state %s changed from %v %s to %v %s: the compiled step would trace again", name, state[j].Shape(), state[j].Dtype(), fresh[j].Shape(), fresh[j].Dtype())
			}
		}
		pw, pt := fresh[1], fresh[4]
		backW := mlx.Matmul(pw, mlx.Matmul(mlx.Transpose(pw), grads[0]))
		backT := mlx.Matmul(mlx.Matmul(grads[1], pt), mlx.Transpose(pt))
		assertClose(t, "P·Pᵀ·G", readData(t, backW), gw, 1e-4)
		assertClose(t, "G·P·Pᵀ", readData(t, backT), gt, 1e-4)
		if _, err := opt.Refresh(grads[:1], state); err == nil {
			t.Fatal("Refresh with 1 gradient for 2 parameters succeeded")
		}
	})
}

func sameShape(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestNewGaLoreRejectsBadConfig(t *testing.T) {
	for _, mod := range []func(*GaLoreConfig){
		func(c *GaLoreConfig) { c.Rank = 0 },
		func(c *GaLoreConfig) { c.UpdateGap = 0 },
		func(c *GaLoreConfig) { c.Scale = 0 },
		func(c *GaLoreConfig) { c.AdamW.Beta1 = 1 },
	} {
		cfg := DefaultGaLoreConfig()
		mod(&cfg)
		if _, err := NewGaLore(fixtureParams(), cfg); err == nil {
			t.Errorf("NewGaLore(%+v) succeeded, want an error", cfg)
		}
	}
}
