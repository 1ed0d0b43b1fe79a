package optim

import (
	"math"
	"testing"
)

// refAdamW is PyTorch's AdamW in float64, for one parameter.
func refAdamW(c AdamWConfig, t int, lr float64, name string, decay bool, p, g []float64, st map[string][]float64) {
	m := refSlot(st, name+".adam_m", len(p))
	v := refSlot(st, name+".adam_v", len(p))
	bc1 := 1 - math.Pow(c.Beta1, float64(t))
	bc2 := 1 - math.Pow(c.Beta2, float64(t))
	for k := range p {
		m[k] = c.Beta1*m[k] + (1-c.Beta1)*g[k]
		v[k] = c.Beta2*v[k] + (1-c.Beta2)*g[k]*g[k]
		if decay {
			p[k] -= lr * c.WeightDecay * p[k]
		}
		p[k] -= lr * (m[k] / bc1) / (math.Sqrt(v[k]/bc2) + c.Eps)
	}
}

func TestAdamWMatchesReference(t *testing.T) {
	cfg := DefaultAdamWConfig()
	cfg.WeightDecay = 0.5 // large enough that a missing or misplaced decay shows
	opt, err := NewAdamW(fixtureParams(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkAgainstReference(t, opt, fixtureParams(), func(step int, lr float64, params []Param, p, g [][]float64, st map[string][]float64) {
		for i, prm := range params {
			refAdamW(cfg, step, lr, prm.Name, prm.Decay, p[i], g[i], st)
		}
	})
}

func TestLionMatchesReference(t *testing.T) {
	cfg := DefaultLionConfig()
	opt, err := NewLion(fixtureParams(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkAgainstReference(t, opt, fixtureParams(), refLion(t, cfg))
}

// refLion is Lion in float64.
func refLion(t *testing.T, cfg LionConfig) refOptimizer {
	return func(step int, lr float64, params []Param, p, g [][]float64, st map[string][]float64) {
		for i, prm := range params {
			m := refSlot(st, prm.Name+".lion_m", len(p[i]))
			for k := range p[i] {
				c := cfg.Beta1*m[k] + (1-cfg.Beta1)*g[i][k]
				if math.Abs(c) < 1e-4 {
					t.Fatalf("fixture puts Lion's interpolation at %g for %s[%d]: its sign is not robust to float32", c, prm.Name, k)
				}
				if prm.Decay {
					p[i][k] *= 1 - lr*cfg.WeightDecay
				}
				p[i][k] -= lr * math.Copysign(1, c)
				m[k] = cfg.Beta2*m[k] + (1-cfg.Beta2)*g[i][k]
			}
		}
	}
}

// refAdafactor is Adafactor in float64 as MLX's Python optimizer computes it
// with relative_step off, for the fixture's 1-D and 2-D parameters.
func refAdafactor(c AdafactorConfig) refOptimizer {
	return func(step int, lr float64, params []Param, p, g [][]float64, st map[string][]float64) {
		beta2 := 1 - math.Pow(float64(step), c.DecayRate)
		for i, prm := range params {
			n := len(p[i])
			u := make([]float64, n)
			if len(prm.Shape) == 2 {
				rows, cols := prm.Shape[0], prm.Shape[1]
				r := refSlot(st, prm.Name+".adafactor_row", rows)
				col := refSlot(st, prm.Name+".adafactor_col", cols)
				for a := range rows {
					s := 0.0
					for b := range cols {
						s += g[i][a*cols+b]*g[i][a*cols+b] + c.Eps1
					}
					r[a] = beta2*r[a] + (1-beta2)*s/float64(cols)
				}
				for b := range cols {
					s := 0.0
					for a := range rows {
						s += g[i][a*cols+b]*g[i][a*cols+b] + c.Eps1
					}
					col[b] = beta2*col[b] + (1-beta2)*s/float64(rows)
				}
				meanR := 0.0
				for _, x := range r {
					meanR += x / float64(rows)
				}
				for a := range rows {
					for b := range cols {
						vhat := r[a] / meanR * col[b]
						u[a*cols+b] = g[i][a*cols+b] / math.Sqrt(vhat)
					}
				}
			} else {
				v := refSlot(st, prm.Name+".adafactor_v", n)
				for k := range v {
					v[k] = beta2*v[k] + (1-beta2)*(g[i][k]*g[i][k]+c.Eps1)
					u[k] = g[i][k] / math.Sqrt(v[k])
				}
			}
			div := math.Max(1, refRMS(u)/c.ClipThreshold)
			alpha := lr
			if c.ScaleParameter {
				alpha = lr * math.Max(c.Eps2, refRMS(p[i]))
			}
			for k := range u {
				u[k] = alpha * u[k] / div
			}
			if c.Beta1 > 0 {
				m := refSlot(st, prm.Name+".adafactor_m", n)
				for k := range m {
					m[k] = c.Beta1*m[k] + (1-c.Beta1)*u[k]
					u[k] = m[k]
				}
			}
			for k := range p[i] {
				if prm.Decay {
					p[i][k] -= c.WeightDecay * alpha * p[i][k]
				}
				p[i][k] -= u[k]
			}
		}
	}
}

func refRMS(x []float64) float64 {
	s := 0.0
	for _, v := range x {
		s += v * v
	}
	return math.Sqrt(s / float64(len(x)))
}

func TestAdafactorMatchesReference(t *testing.T) {
	variants := map[string]func(*AdafactorConfig){
		"default":           func(*AdafactorConfig) {},
		"momentum-decay":    func(c *AdafactorConfig) { c.Beta1, c.WeightDecay = 0.9, 0.5 },
		"unscaled-clipping": func(c *AdafactorConfig) { c.ScaleParameter, c.ClipThreshold = false, 0.5 },
	}
	for name, change := range variants {
		t.Run(name, func(t *testing.T) {
			cfg := DefaultAdafactorConfig()
			change(&cfg)
			opt, err := NewAdafactor(fixtureParams(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			checkAgainstReference(t, opt, fixtureParams(), refAdafactor(cfg))
		})
	}
}

// refMatmul returns a·b for row-major a [n,k] and b [k,m].
func refMatmul(a, b []float64, n, k, m int) []float64 {
	out := make([]float64, n*m)
	for i := range n {
		for j := range m {
			s := 0.0
			for l := range k {
				s += a[i*k+l] * b[l*m+j]
			}
			out[i*m+j] = s
		}
	}
	return out
}

// refTranspose returns the transpose of row-major a [n,m].
func refTranspose(a []float64, n, m int) []float64 {
	out := make([]float64, n*m)
	for i := range n {
		for j := range m {
			out[j*n+i] = a[i*m+j]
		}
	}
	return out
}

// refNewtonSchulz is Muon's quintic Newton–Schulz orthogonalisation in float64.
func refNewtonSchulz(g []float64, rows, cols, steps int, eps float64) []float64 {
	x := append([]float64(nil), g...)
	n, m := rows, cols
	if rows > cols {
		x = refTranspose(x, rows, cols)
		n, m = cols, rows
	}
	norm := 0.0
	for _, v := range x {
		norm += v * v
	}
	norm = math.Sqrt(norm) + eps
	for k := range x {
		x[k] /= norm
	}
	for range steps {
		a := refMatmul(x, refTranspose(x, n, m), n, m, n)
		aa := refMatmul(a, a, n, n, n)
		b := make([]float64, n*n)
		for k := range b {
			b[k] = -4.7750*a[k] + 2.0315*aa[k]
		}
		bx := refMatmul(b, x, n, n, m)
		for k := range x {
			x[k] = 3.4445*x[k] + bx[k]
		}
	}
	if rows > cols {
		x = refTranspose(x, n, m)
	}
	return x
}

func TestMuonMatchesReference(t *testing.T) {
	for _, nesterov := range []bool{true, false} {
		t.Run(map[bool]string{true: "nesterov", false: "plain"}[nesterov], func(t *testing.T) {
			cfg := DefaultMuonConfig()
			cfg.Nesterov = nesterov
			cfg.WeightDecay = 0.5
			cfg.AdamW.WeightDecay = 0.5
			cfg.AdamWLRScale = 0.5
			opt, err := NewMuon(fixtureParams(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			checkAgainstReference(t, opt, fixtureParams(), func(step int, lr float64, params []Param, p, g [][]float64, st map[string][]float64) {
				for i, prm := range params {
					if !prm.Matrix {
						refAdamW(cfg.AdamW, step, lr*cfg.AdamWLRScale, prm.Name, prm.Decay, p[i], g[i], st)
						continue
					}
					mu := cfg.Momentum
					m := refSlot(st, prm.Name+".muon_m", len(p[i]))
					u := make([]float64, len(m))
					for k := range m {
						m[k] = mu*m[k] + (1-mu)*g[i][k]
						u[k] = m[k]
						if nesterov {
							u[k] = (1-mu)*g[i][k] + mu*m[k]
						}
					}
					rows, cols := prm.Shape[0], prm.Shape[1]
					o := refNewtonSchulz(u, rows, cols, 5, 1e-7)
					scale := math.Sqrt(math.Max(1, float64(rows)/float64(cols)))
					for k := range p[i] {
						if prm.Decay {
							p[i][k] *= 1 - lr*cfg.WeightDecay
						}
						p[i][k] -= lr * scale * o[k]
					}
				}
			})
		})
	}
}

// TestNewtonSchulzOrthogonalises checks the reference itself: five quintic
// iterations push both singular values of the fixture's 2×3 and 4×2
// matrices from their spread into Muon's known band of roughly [0.68, 1.13]
// (the coefficients trade exactness for speed), whatever the input scale.
func TestNewtonSchulzOrthogonalises(t *testing.T) {
	for _, shape := range [][]int{{2, 3}, {4, 2}} {
		for step := range 3 {
			g := gradValue(step, 0, Param{Shape: shape})
			for k := range g {
				g[k] *= 37 // orthogonalisation ignores scale
			}
			n, m := shape[0], shape[1]
			x := refNewtonSchulz(g, n, m, 5, 1e-7)
			if n > m {
				x = refTranspose(x, n, m)
				n, m = m, n
			}
			a := refMatmul(x, refTranspose(x, n, m), n, m, n) // 2×2, eigenvalues σ²
			half, det := (a[0]+a[3])/2, a[0]*a[3]-a[1]*a[2]
			d := math.Sqrt(half*half - det)
			for _, sigma := range []float64{math.Sqrt(half + d), math.Sqrt(half - d)} {
				if sigma < 0.6 || sigma > 1.2 {
					t.Fatalf("shape %v grad %d: singular value %g after Newton–Schulz, want within [0.6, 1.2]", shape, step, sigma)
				}
			}
		}
	}
}

func TestSGDMatchesReference(t *testing.T) {
	variants := map[string]SGDConfig{
		"momentum": {Momentum: 0.9, WeightDecay: 0.5},
		"nesterov": {Momentum: 0.9, Nesterov: true, WeightDecay: 0.5},
		"plain":    {WeightDecay: 0.5},
	}
	for name, cfg := range variants {
		t.Run(name, func(t *testing.T) {
			opt, err := NewSGD(fixtureParams(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			checkAgainstReference(t, opt, fixtureParams(), refSGD(cfg))
		})
	}
}

// refSGD is SGD in float64.
func refSGD(cfg SGDConfig) refOptimizer {
	return func(step int, lr float64, params []Param, p, g [][]float64, st map[string][]float64) {
		for i, prm := range params {
			var buf []float64
			if cfg.Momentum > 0 {
				buf = refSlot(st, prm.Name+".sgd_m", len(p[i]))
			}
			for k := range p[i] {
				d := g[i][k]
				if prm.Decay {
					d += cfg.WeightDecay * p[i][k]
				}
				if buf != nil {
					buf[k] = cfg.Momentum*buf[k] + d
					if cfg.Nesterov {
						d += cfg.Momentum * buf[k]
					} else {
						d = buf[k]
					}
				}
				p[i][k] -= lr * d
			}
		}
	}
}
