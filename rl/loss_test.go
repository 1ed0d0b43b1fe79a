package rl

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/posttrainllm/posttrainllm/mlx"
)

// policyLossHost is PolicyLoss in float64 on the host, for tests: the
// loss and its gradient with respect to logp.
func policyLossHost(logp, old, ref, adv, weight []float64, T int, clip Clip, beta float64) (loss float64, grad []float64) {
	grad = make([]float64, len(logp))
	for i := range logp {
		a := adv[i/T]
		r := math.Exp(logp[i] - old[i])
		c := math.Min(math.Max(r, 1-clip.Low), 1+clip.High)
		l, g := -r*a, -r*a // d(−r·A)/dlogp = −r·A
		if c*a < r*a {
			l, g = -c*a, 0
		}
		if ref != nil {
			d := ref[i] - logp[i]
			l += beta * (math.Exp(d) - d - 1)
			g += beta * (1 - math.Exp(d))
		}
		loss += weight[i] * l
		grad[i] = weight[i] * g
	}
	return loss, grad
}

// lossCase is a hand-built batch: two groups of two completions of T
// positions, ragged masks, sampled log-probabilities near the policy's so
// that some ratios fall inside the clip range and some outside.
type lossCase struct {
	B, T                int
	logp, old, ref, adv []float64
	mask                []float32
}

func newLossCase(seed uint64) lossCase {
	rng := rand.New(rand.NewPCG(seed, 1))
	c := lossCase{B: 4, T: 6}
	n := c.B * c.T
	c.logp, c.old, c.ref, c.mask = make([]float64, n), make([]float64, n), make([]float64, n), make([]float32, n)
	lengths := []int{6, 3, 5, 1}
	for i := range n {
		c.logp[i] = -3 * rng.Float64()
		c.old[i] = c.logp[i] + 0.5*rng.NormFloat64()
		c.ref[i] = c.logp[i] + 0.3*rng.NormFloat64()
		if i%c.T < lengths[i/c.T] {
			c.mask[i] = 1
		}
	}
	c.adv = []float64{1.2, -1.2, 0.4, -0.7}
	return c
}

func f32s(v []float64, shape ...int) *mlx.Array {
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = float32(x)
	}
	return mlx.FromSlice(out, shape...)
}

// Each loss type's loss and its gradient with respect to the policy's
// log-probabilities match float64 host values, with and without the KL
// term, for a trust region that clips some positions on both sides.
func TestPolicyLossMatchesHost(t *testing.T) {
	c := newLossCase(1)
	clip := Clip{Low: 0.2, High: 0.28}
	for _, lt := range LossTypes {
		for _, beta := range []float64{0, 0.05} {
			w32, err := TokenWeights(lt, c.mask, c.B, c.T, 2, 8)
			if err != nil {
				t.Fatal(err)
			}
			w := make([]float64, len(w32))
			for i, x := range w32 {
				w[i] = float64(x)
			}
			var ref []float64
			if beta != 0 {
				ref = c.ref
			}
			wantLoss, wantGrad := policyLossHost(c.logp, c.old, ref, c.adv, w, c.T, clip, beta)
			mlx.Do(func() error {
				vg, err := mlx.ValueAndGrad(func(in []*mlx.Array) ([]*mlx.Array, error) {
					var r *mlx.Array
					if beta != 0 {
						r = in[2]
					}
					loss, aux := PolicyLoss(in[0], in[1], r, in[3], in[4], clip, beta)
					return append([]*mlx.Array{loss}, aux...), nil
				}, 0)
				if err != nil {
					t.Fatal(err)
				}
				defer vg.Free()
				vals, grads, err := vg.Call(f32s(c.logp, c.B, c.T), f32s(c.old, c.B, c.T), f32s(c.ref, c.B, c.T), f32s(c.adv, c.B), f32s(w, c.B, c.T))
				if err != nil {
					t.Fatal(err)
				}
				loss, err := vals[0].Item()
				if err != nil {
					t.Fatal(err)
				}
				if math.Abs(loss-wantLoss) > 1e-5*math.Max(1, math.Abs(wantLoss)) {
					t.Fatalf("%s β=%g: loss %.7f, host %.7f", lt, beta, loss, wantLoss)
				}
				g, err := grads[0].Float32s()
				if err != nil {
					t.Fatal(err)
				}
				zero := 0
				for i := range g {
					if math.Abs(float64(g[i])-wantGrad[i]) > 1e-5 {
						t.Fatalf("%s β=%g: gradient[%d] %.7f, host %.7f", lt, beta, i, g[i], wantGrad[i])
					}
					if c.mask[i] == 1 && wantGrad[i] == 0 {
						zero++
					}
				}
				if beta == 0 && zero == 0 {
					t.Fatalf("%s: no position was clipped: the case does not test the trust region", lt)
				}
				return nil
			})
		}
	}
}

// A group whose completions got equal rewards has zero advantages, and
// without a KL term its completions get zero gradient.
func TestEqualRewardsGiveZeroGradient(t *testing.T) {
	c := newLossCase(2)
	w, err := TokenWeights(LossDAPO, c.mask, c.B, c.T, 4, 8)
	if err != nil {
		t.Fatal(err)
	}
	adv := []float64{0, 0, 0, 0}
	mlx.Do(func() error {
		vg, err := mlx.ValueAndGrad(func(in []*mlx.Array) ([]*mlx.Array, error) {
			loss, _ := PolicyLoss(in[0], in[1], nil, in[2], in[3], Clip{0.2, 0.2}, 0)
			return []*mlx.Array{loss}, nil
		}, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer vg.Free()
		_, grads, err := vg.Call(f32s(c.logp, c.B, c.T), f32s(c.old, c.B, c.T), f32s(adv, c.B), mlx.FromSlice(w, c.B, c.T))
		if err != nil {
			t.Fatal(err)
		}
		g, err := grads[0].Float32s()
		if err != nil {
			t.Fatal(err)
		}
		for i, x := range g {
			if x != 0 {
				t.Fatalf("gradient[%d] = %g with equal rewards", i, x)
			}
		}
		return nil
	})
}

// When the policy is the one that sampled (a second iteration over the
// same rollouts before any update), every ratio is 1 and nothing clips.
func TestUnchangedPolicyHasRatioOne(t *testing.T) {
	c := newLossCase(3)
	w, err := TokenWeights(LossDAPO, c.mask, c.B, c.T, 2, 8)
	if err != nil {
		t.Fatal(err)
	}
	mlx.Do(func() error {
		_, aux := PolicyLoss(f32s(c.logp, c.B, c.T), f32s(c.logp, c.B, c.T), nil, f32s(c.adv, c.B), mlx.FromSlice(w, c.B, c.T), Clip{0.2, 0.2}, 0)
		clipped, _ := aux[1].Item()
		ratio, _ := aux[2].Item()
		if clipped != 0 || math.Abs(ratio-1) > 1e-6 {
			t.Fatalf("clip fraction %g, mean ratio %g; want 0 and 1", clipped, ratio)
		}
		return nil
	})
}

// The weights of each loss type add up as its normalisation says.
func TestTokenWeights(t *testing.T) {
	c := newLossCase(4)
	tokens := 0.0
	for _, m := range c.mask {
		tokens += float64(m)
	}
	for lt, want := range map[LossType]float64{LossGRPO: 1, LossDAPO: 1, LossBNPO: 2, LossDrGRPO: tokens / (4 * 8)} {
		w, err := TokenWeights(lt, c.mask, c.B, c.T, 2, 8)
		if err != nil {
			t.Fatal(err)
		}
		sum := 0.0
		for i, x := range w {
			sum += float64(x)
			if c.mask[i] == 0 && x != 0 {
				t.Fatalf("%s: weight %g off the mask at %d", lt, x, i)
			}
		}
		if math.Abs(sum-want) > 1e-5 {
			t.Fatalf("%s: weights add up to %g, want %g", lt, sum, want)
		}
	}
	// grpo: a one-token completion's token weighs as much as a whole longer completion.
	w, _ := TokenWeights(LossGRPO, c.mask, c.B, c.T, 2, 8)
	if math.Abs(float64(w[3*c.T])-0.25) > 1e-6 || math.Abs(float64(w[0])-0.25/6) > 1e-6 {
		t.Fatalf("grpo weights %v", w)
	}
	if _, err := TokenWeights("ppo", c.mask, c.B, c.T, 2, 8); err == nil {
		t.Fatal("loss type ppo was accepted")
	}
	if _, err := TokenWeights(LossDAPO, c.mask, c.B, c.T, 3, 8); err == nil {
		t.Fatal("4 rows in microbatches of 3 were accepted")
	}
}
