package optim

import (
	"math"
	"strconv"
	"testing"

	"github.com/posttrainllm/posttrainllm/mlx"
)

// TestSophiaMatchesReference alternates Hessian updates (with sampled-label
// gradients ten times the fixture's) and updates, and compares parameters
// and state with SophiaG written out in float64: the ratio is clipped at 1
// for some elements and not for others, so both branches are checked.
func TestSophiaMatchesReference(t *testing.T) {
	cfg := DefaultSophiaConfig()
	cfg.WeightDecay, cfg.Tokens = 0.5, 3
	params := fixtureParams()
	opt, err := NewSophia(params, cfg)
	if err != nil {
		t.Fatal(err)
	}
	onMLX(t, func() {
		ps := paramArrays(t, params, mlx.Float32)
		state, err := opt.Init()
		if err != nil {
			t.Fatal(err)
		}
		refP := make([][]float64, len(params))
		refM := make([][]float64, len(params))
		refH := make([][]float64, len(params))
		for i, p := range params {
			refP[i] = initialValue(i, p)
			refM[i] = make([]float64, len(refP[i]))
			refH[i] = make([]float64, len(refP[i]))
		}
		clipped, unclipped := 0, 0
		for step, lrv := range fixtureLRs {
			// Hessian update from the sampled-label gradient.
			hgs := make([]*mlx.Array, len(params))
			for i, p := range params {
				hg := gradValue(step+7, i, p)
				for k := range hg {
					hg[k] *= 10
					refH[i][k] = cfg.Beta2*refH[i][k] + (1-cfg.Beta2)*hg[k]*hg[k]
				}
				hgs[i] = fromData(t, hg, p.Shape, mlx.Float32)
			}
			hstate, err := opt.UpdateHessian(hgs, state)
			if err != nil {
				t.Fatal(err)
			}
			mlx.Free(state...)
			state = hstate
			// The update.
			gs := gradArrays(t, params, step, mlx.Float32)
			lr := mlx.Scalar(lrv, mlx.Float32)
			newPs, newState, err := opt.Update(ps, gs, state, lr)
			if err != nil {
				t.Fatal(err)
			}
			for i, p := range params {
				g := gradValue(step, i, p)
				for k := range g {
					refM[i][k] = cfg.Beta1*refM[i][k] + (1-cfg.Beta1)*g[k]
					if p.Decay {
						refP[i][k] *= 1 - lrv*cfg.WeightDecay
					}
					ratio := math.Abs(refM[i][k]) / (cfg.Rho*float64(cfg.Tokens)*refH[i][k] + cfg.Eps)
					if ratio >= 1 {
						ratio, clipped = 1, clipped+1
					} else {
						unclipped++
					}
					refP[i][k] -= lrv * math.Copysign(1, refM[i][k]) * ratio
				}
				what := "sophia update " + strconv.Itoa(step) + " " + p.Name
				assertClose(t, what, readData(t, newPs[i]), refP[i], 1e-5)
				j := opt.lay.first[i]
				assertClose(t, what+" m", readData(t, newState[j]), refM[i], 1e-5)
				assertClose(t, what+" h", readData(t, newState[j+1]), refH[i], 1e-5)
			}
			mlx.Free(ps...)
			mlx.Free(state...)
			mlx.Free(gs...)
			mlx.Free(hgs...)
			lr.Free()
			ps, state = newPs, newState
		}
		if clipped == 0 || unclipped == 0 {
			t.Fatalf("the fixture clipped %d ratios and left %d unclipped; want both branches exercised", clipped, unclipped)
		}
	})
}

func TestNewSophiaRejectsBadConfig(t *testing.T) {
	for _, mod := range []func(*SophiaConfig){
		func(c *SophiaConfig) { c.Tokens = 0 },
		func(c *SophiaConfig) { c.HessianEvery = 0 },
		func(c *SophiaConfig) { c.Rho = 0 },
		func(c *SophiaConfig) { c.Beta2 = 1 },
	} {
		cfg := DefaultSophiaConfig()
		mod(&cfg)
		if _, err := NewSophia(fixtureParams(), cfg); err == nil {
			t.Errorf("NewSophia(%+v) succeeded, want an error", cfg)
		}
	}
}
