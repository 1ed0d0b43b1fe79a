package rl

import (
	"fmt"

	"github.com/posttrainllm/posttrainllm/mlx"
)

// LossType is how GRPO's per-token losses are normalised, as TRL names
// the variants.
type LossType string

// The loss types.
const (
	// LossGRPO averages each completion's tokens, then the completions
	// (the original GRPO: a long completion's tokens weigh less).
	LossGRPO LossType = "grpo"
	// LossBNPO averages over every completion token of the microbatch.
	LossBNPO LossType = "bnpo"
	// LossDrGRPO divides the sum over completion tokens by the number of
	// completions times the completion budget (Dr. GRPO: no length bias).
	LossDrGRPO LossType = "dr_grpo"
	// LossDAPO divides the sum over completion tokens by the completion
	// tokens of the whole update, across microbatches (DAPO; TRL's
	// default).
	LossDAPO LossType = "dapo"
)

// LossTypes lists the loss types by name.
var LossTypes = []LossType{LossGRPO, LossBNPO, LossDrGRPO, LossDAPO}

// ParseLossType reads a loss type's name.
func ParseLossType(s string) (LossType, error) {
	for _, t := range LossTypes {
		if string(t) == s {
			return t, nil
		}
	}
	return "", fmt.Errorf("loss type %q: want one of grpo, bnpo, dr_grpo, dapo", s)
}

// Clip is GRPO's trust region: the probability ratio of a token under the
// policy and under the policy that sampled it is clipped to
// [1 − Low, 1 + High] (DAPO's clip-higher sets High above Low).
type Clip struct{ Low, High float64 }

// TokenWeights returns the weight of each target position of an update's
// rows ([rows·T], row-major) under loss type t, so that the loss of every
// type is Σ weight·ℓ over the positions: mask [rows·T] is 1 on the
// completion tokens a row is trained on, rows are microbatches of
// microBatch rows in the update's order, and budget is the completion
// budget (Dr. GRPO's divisor). Positions off the mask weigh 0. The
// weights of an update add up to 1 for grpo and dapo, to the number of
// microbatches for bnpo (whose step averages microbatches), and less for
// dr_grpo (completions shorter than the budget).
func TokenWeights(t LossType, mask []float32, rows, T, microBatch, budget int) ([]float32, error) {
	if rows < 1 || T < 1 || len(mask) != rows*T || microBatch < 1 || rows%microBatch != 0 || budget < 1 {
		return nil, fmt.Errorf("rl: token weights of %d mask entries for %d rows of %d (microbatches of %d, budget %d)", len(mask), rows, T, microBatch, budget)
	}
	w := make([]float32, len(mask))
	count := func(from, to int) float64 { // masked positions in rows [from, to)
		n := 0.0
		for _, m := range mask[from*T : to*T] {
			n += float64(m)
		}
		return n
	}
	set := func(row int, scale float64) {
		for i := row * T; i < (row+1)*T; i++ {
			w[i] = float32(float64(mask[i]) * scale)
		}
	}
	total := count(0, rows)
	for r := range rows {
		switch t {
		case LossGRPO:
			if n := count(r, r+1); n > 0 {
				set(r, 1/(n*float64(rows)))
			}
		case LossBNPO:
			mb := r / microBatch * microBatch
			if n := count(mb, mb+microBatch); n > 0 {
				set(r, 1/n)
			}
		case LossDrGRPO:
			set(r, 1/float64(rows*budget))
		case LossDAPO:
			if total > 0 {
				set(r, 1/total)
			}
		default:
			return nil, fmt.Errorf("rl: loss type %q: want one of grpo, bnpo, dr_grpo, dapo", t)
		}
	}
	return w, nil
}

// PolicyLoss is GRPO's loss of a microbatch and its auxiliary sums, as
// MLX arrays inside a compiled step: logp [B, T] are the trained
// policy's log-probabilities of the target tokens, old [B, T] those of
// the policy that sampled them, ref [B, T] the reference policy's (nil
// without a KL term), adv [B] each row's advantage and weight [B, T] the
// positions' weights (TokenWeights). Per position, with r = exp(logp −
// old),
//
//	ℓ = −min(r·A, clip(r, 1−Low, 1+High)·A) + β·(exp(ref − logp) − (ref − logp) − 1)
//
// (the KL term is Schulman's k3 estimator of KL(π‖π_ref)), and the loss
// is Σ weight·ℓ. aux are the weighted sums of the KL estimate, of the
// clipped positions (the clipped branch is the smaller: its gradient is
// zero) and of the ratio, each Σ weight·x: with weights adding up to 1
// they are means over the completion tokens.
func PolicyLoss(logp, old, ref, adv, weight *mlx.Array, clip Clip, beta float64) (loss *mlx.Array, aux []*mlx.Array) {
	B, T := logp.Dim(0), logp.Dim(1)
	f32 := func(a *mlx.Array) *mlx.Array { return mlx.AsType(a, mlx.Float32) }
	logp, old, weight = f32(logp), f32(old), f32(weight)
	a := mlx.Reshape(f32(adv), B, 1)
	ratio := mlx.Exp(mlx.Subtract(logp, old))
	clipped := mlx.Minimum(mlx.Maximum(ratio, mlx.Scalar(1-clip.Low, mlx.Float32)), mlx.Scalar(1+clip.High, mlx.Float32))
	unclippedGain, clippedGain := mlx.Multiply(ratio, a), mlx.Multiply(clipped, a)
	per := mlx.Negative(mlx.Minimum(unclippedGain, clippedGain))
	isClipped := mlx.AsType(mlx.Less(clippedGain, unclippedGain), mlx.Float32)
	kl := mlx.Zeros([]int{B, T}, mlx.Float32)
	if ref != nil {
		d := mlx.Subtract(f32(ref), logp)
		kl = mlx.Subtract(mlx.Expm1(d), d) // exp(d)−d−1 without float32's cancellation near d = 0
		if beta != 0 {
			per = mlx.Add(per, mlx.MulScalar(kl, beta))
		}
	}
	sum := func(x *mlx.Array) *mlx.Array { return mlx.Sum(mlx.Multiply(weight, x)) }
	return sum(per), []*mlx.Array{sum(kl), sum(isClipped), sum(ratio)}
}

// PolicyAux names PolicyLoss's auxiliary sums.
var PolicyAux = []string{"kl", "clip_fraction", "ratio"}
