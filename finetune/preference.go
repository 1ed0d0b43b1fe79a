package finetune

import (
	"fmt"
	"math"

	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/peft"
	"github.com/posttrainllm/posttrainllm/step"
)

// PreferenceAux names the auxiliary sums of a preference step
// (step.StepStats.Aux, step.State.IntervalAux), in order: the mean reward of the
// chosen and of the rejected answers, the mean margin between them, and
// the share of pairs whose chosen reward is the higher (accuracy).
var PreferenceAux = []string{"reward_chosen", "reward_rejected", "margin", "accuracy"}

// Preference is a preference objective with its hyperparameters.
type Preference struct {
	Objective ObjectiveName `json:"objective"`
	// Beta scales the log-ratios of DPO and IPO (IPO's margin is 1/(2β))
	// and SimPO's length-normalised log-probabilities.
	Beta float64 `json:"beta,omitempty"`
	// Lambda weighs ORPO's odds-ratio term against its NLL term.
	Lambda float64 `json:"lambda,omitempty"`
	// Gamma is SimPO's target margin.
	Gamma float64 `json:"gamma,omitempty"`
}

// WithDefaults fills the hyperparameters the objective reads and leaves
// unset with the values of the objective's paper or TRL: β 0.1 for DPO
// and IPO, β 2 and γ 1 for SimPO, λ 0.1 for ORPO.
func (p Preference) WithDefaults() Preference {
	switch p.Objective {
	case DPO, IPO:
		if p.Beta == 0 {
			p.Beta = 0.1
		}
	case SimPO:
		if p.Beta == 0 {
			p.Beta = 2
		}
		if p.Gamma == 0 {
			p.Gamma = 1
		}
	case ORPO:
		if p.Lambda == 0 {
			p.Lambda = 0.1
		}
	}
	return p
}

// Validate refuses an unknown objective (SFT is not a preference
// objective) and hyperparameters out of range.
func (p Preference) Validate() error {
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	switch p.Objective {
	case DPO, IPO, SimPO:
		if !finite(p.Beta) || p.Beta <= 0 {
			return fmt.Errorf("preference: beta = %g for %s, want a finite value > 0", p.Beta, p.Objective)
		}
		if !finite(p.Gamma) || (p.Objective != SimPO && p.Gamma != 0) {
			return fmt.Errorf("preference: gamma = %g for %s, want it unset (SimPO's target margin)", p.Gamma, p.Objective)
		}
	case ORPO:
		if !finite(p.Lambda) || p.Lambda < 0 {
			return fmt.Errorf("preference: lambda = %g for orpo, want a finite value >= 0", p.Lambda)
		}
		if p.Beta != 0 || p.Gamma != 0 {
			return fmt.Errorf("preference: beta = %g, gamma = %g for orpo, want them unset (orpo's weight is lambda)", p.Beta, p.Gamma)
		}
	default:
		return fmt.Errorf("preference: objective %q, want one of dpo, ipo, orpo, simpo", p.Objective)
	}
	if p.Objective != ORPO && p.Lambda != 0 {
		return fmt.Errorf("preference: lambda = %g for %s, want it unset (ORPO's weight)", p.Lambda, p.Objective)
	}
	return nil
}

// NeedsReference reports whether the objective compares the policy with
// a frozen reference model (DPO, IPO).
func (p Preference) NeedsReference() bool { return p.Objective == DPO || p.Objective == IPO }

// SequenceLogProbs returns, per row of a LossTerms cross-entropy ce
// [B, T], the log-probability of its counted targets, −Σ mask·ce, and
// their number Σ mask: [B] float32 each.
func SequenceLogProbs(ce, mask *mlx.Array) (logp, count *mlx.Array) {
	return mlx.Negative(mlx.Sum(mlx.Multiply(ce, mask), -1)), mlx.Sum(mask, -1)
}

// pairColumns splits a [B] per-row array into its chosen (even rows) and
// rejected (odd rows) halves, [B/2] each.
func pairColumns(a *mlx.Array) (chosen, rejected *mlx.Array) {
	p := mlx.Reshape(a, a.Dim(0)/2, 2)
	col := func(k int) *mlx.Array {
		return mlx.Reshape(mlx.Slice(p, []int{0, k}, []int{p.Dim(0), k + 1}), p.Dim(0))
	}
	return col(0), col(1)
}

// negLogSigmoid is −log σ(z) = log(e⁰ + e^−z), as a logsumexp: stable
// for any z, and with the exact gradient −σ(−z) everywhere. (The usual
// max(−z, 0) + log1p(e^−|z|) has kinks at z = 0 whose one-sided
// gradients cancel there: at a fresh adapter, where DPO's z is exactly 0,
// it would give a zero gradient and training would never start.)
func negLogSigmoid(z *mlx.Array) *mlx.Array {
	pair := mlx.Concatenate([]*mlx.Array{mlx.ExpandDims(mlx.ZerosLike(z), -1), mlx.ExpandDims(mlx.Negative(z), -1)}, -1)
	return mlx.LogSumExp(pair, -1)
}

// PairLoss is the preference loss of one microbatch of pairs (rows 2i
// chosen, 2i+1 rejected) from per-row sequence log-probabilities logp and
// answer lengths count ([B] each), the reference's log-probabilities ref
// ([B]; read by DPO and IPO only) and the row weights w ([B]: the pair's
// weight on its chosen row, 0 on the rejected one). It returns Σ weight·
// loss over the pairs and the weighted sums of PreferenceAux (a tie
// counts as half a pair won in the accuracy). The rewards
// are β·(π − π_ref) for DPO and IPO, β·π/|y| for SimPO and λ·π/|y| for
// ORPO (as TRL logs them).
func (p Preference) PairLoss(logp, count, ref, w *mlx.Array) (*mlx.Array, []*mlx.Array) {
	pc, pr := pairColumns(logp)
	wc, _ := pairColumns(w)
	var loss, rc, rr *mlx.Array
	switch p.Objective {
	case DPO, IPO:
		if ref == nil {
			err := fmt.Errorf("preference: %s needs reference log-probabilities", p.Objective)
			return mlx.ErrorArray(err), nil
		}
		refc, refr := pairColumns(ref)
		dc, dr := mlx.Subtract(pc, refc), mlx.Subtract(pr, refr)
		h := mlx.Subtract(dc, dr)
		if p.Objective == DPO {
			loss = negLogSigmoid(mlx.MulScalar(h, p.Beta))
		} else {
			loss = mlx.Square(mlx.AddScalar(h, -1/(2*p.Beta)))
		}
		rc, rr = mlx.MulScalar(dc, p.Beta), mlx.MulScalar(dr, p.Beta)
	case SimPO, ORPO:
		nc, nr := pairColumns(count)
		one := mlx.Scalar(1, mlx.Float32) // an answer of no token has log-probability 0
		ac := mlx.Divide(pc, mlx.Maximum(nc, one))
		ar := mlx.Divide(pr, mlx.Maximum(nr, one))
		if p.Objective == SimPO {
			z := mlx.AddScalar(mlx.MulScalar(mlx.Subtract(ac, ar), p.Beta), -p.Gamma)
			loss = negLogSigmoid(z)
			rc, rr = mlx.MulScalar(ac, p.Beta), mlx.MulScalar(ar, p.Beta)
		} else {
			// log odds(p) = log p − log(1 − p) with log p the mean
			// log-probability per token, kept below 0 so that a certain
			// answer gives a large finite log odds, not log 0.
			log1mp := func(a *mlx.Array) *mlx.Array {
				return mlx.Log1p(mlx.Negative(mlx.Exp(mlx.Minimum(a, mlx.Scalar(-1e-6, mlx.Float32)))))
			}
			logOdds := mlx.Subtract(mlx.Subtract(ac, ar), mlx.Subtract(log1mp(ac), log1mp(ar)))
			loss = mlx.Add(mlx.Negative(ac), mlx.MulScalar(negLogSigmoid(logOdds), p.Lambda))
			rc, rr = mlx.MulScalar(ac, p.Lambda), mlx.MulScalar(ar, p.Lambda)
		}
	default:
		return mlx.ErrorArray(p.Validate()), nil
	}
	margin := mlx.Subtract(rc, rr)
	// 1 for a pair won, ½ for a tie (a fresh adapter ties every pair), 0
	// for a pair lost.
	acc := mlx.MulScalar(mlx.Add(mlx.AsType(mlx.Greater(rc, rr), mlx.Float32), mlx.AsType(mlx.GreaterEqual(rc, rr), mlx.Float32)), 0.5)
	sum := func(a *mlx.Array) *mlx.Array { return mlx.Sum(mlx.Multiply(a, wc)) }
	return sum(loss), []*mlx.Array{sum(rc), sum(rr), sum(margin), sum(acc)}
}

// PreferenceLoss is the preference loss of a full fine-tune of m, for a
// RowInputs step with PreferenceAux's sums: every parameter
// trainable, nothing frozen; for DPO and IPO the reference
// log-probabilities come precomputed as the row input after the row
// weights (ReferenceLogProbs), else there is no row input.
func PreferenceLoss(m *model.Transformer, p Preference) step.Loss {
	return func(params, _ []*mlx.Array, mb step.Microbatch) (*mlx.Array, []*mlx.Array) {
		ce, _ := m.LossTerms(params, mb.X, mb.Y)
		logp, count := SequenceLogProbs(ce, mb.W)
		var ref *mlx.Array
		if len(mb.Rows) > 1 {
			ref = mb.Rows[1]
		}
		return p.PairLoss(logp, count, ref, mb.Rows[0])
	}
}

// AdapterPreferenceLoss is the preference loss of fine-tuning m through
// adapter a, for a row step with PreferenceAux's sums and no row input
// but the row weights. For DPO and IPO the reference is the base model
// itself: the same forward pass with the adapters' contribution switched
// off (peft.Adapter.BaseLinears), computed inside the step under
// StopGradient from the frozen base the step already holds, so it needs
// no second model in memory and no precomputation, only a forward pass
// per microbatch.
func AdapterPreferenceLoss(m *model.Transformer, a *peft.Adapter, p Preference) step.Loss {
	return func(adapter, base []*mlx.Array, mb step.Microbatch) (*mlx.Array, []*mlx.Array) {
		ce, _ := AdapterTerms(m, a, adapter, base, mb.X, mb.Y)
		logp, count := SequenceLogProbs(ce, mb.W)
		var ref *mlx.Array
		if p.NeedsReference() {
			ref = mlx.StopGradient(AdapterReferenceLogProbs(m, a, base, mb.X, mb.Y, mb.W))
		}
		return p.PairLoss(logp, count, ref, mb.Rows[0])
	}
}

// AdapterReferenceLogProbs is the per-row sequence log-probability
// (SequenceLogProbs) of the base model under adapter a's frozen arrays
// base: the adapted model with the adapters' contribution switched off.
func AdapterReferenceLogProbs(m *model.Transformer, a *peft.Adapter, base []*mlx.Array, x, y, mask *mlx.Array) *mlx.Array {
	lin, params, err := a.BaseLinears(base)
	if err != nil {
		return mlx.ErrorArray(err)
	}
	ce, _ := m.LossTermsWith(params, lin, x, y)
	logp, _ := SequenceLogProbs(ce, mask)
	return logp
}
