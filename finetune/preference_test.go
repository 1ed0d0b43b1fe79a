package finetune

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/internal/mlxtest"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/step"
)

// hostPairLoss is Preference.PairLoss in float64 on the host: the mean
// loss over the pairs and the means of PreferenceAux, weighted by the
// chosen rows' weights.
func hostPairLoss(p Preference, logp, count, ref, w []float64) (float64, []float64) {
	logSig := func(z float64) float64 { return -math.Log1p(math.Exp(-z)) }
	var loss float64
	aux := make([]float64, 4)
	for i := 0; i+1 < len(logp); i += 2 {
		var l, rc, rr float64
		switch p.Objective {
		case DPO, IPO:
			dc, dr := logp[i]-ref[i], logp[i+1]-ref[i+1]
			if p.Objective == DPO {
				l = -logSig(p.Beta * (dc - dr))
			} else {
				l = math.Pow(dc-dr-1/(2*p.Beta), 2)
			}
			rc, rr = p.Beta*dc, p.Beta*dr
		case SimPO:
			ac, ar := logp[i]/count[i], logp[i+1]/count[i+1]
			l = -logSig(p.Beta*(ac-ar) - p.Gamma)
			rc, rr = p.Beta*ac, p.Beta*ar
		case ORPO:
			ac, ar := logp[i]/count[i], logp[i+1]/count[i+1]
			odds := func(a float64) float64 { return a - math.Log(1-math.Exp(a)) }
			l = -ac - p.Lambda*logSig(odds(ac)-odds(ar))
			rc, rr = p.Lambda*ac, p.Lambda*ar
		}
		acc := 0.0
		if rc > rr {
			acc = 1
		} else if rc == rr {
			acc = 0.5
		}
		loss += w[i] * l
		for k, v := range []float64{rc, rr, rc - rr, acc} {
			aux[k] += w[i] * v
		}
	}
	return loss, aux
}

func f32(v []float64) []float32 {
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = float32(x)
	}
	return out
}

func f64(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

// Each objective's loss and metrics match a float64 computation from the
// same log-probabilities, with pairs of different weights and lengths.
func TestPairLossMatchesHost(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const B = 8
	logp, count, ref, w := make([]float64, B), make([]float64, B), make([]float64, B), make([]float64, B)
	for i := range logp {
		count[i] = float64(1 + r.IntN(9))
		logp[i] = -count[i] * (0.2 + 2*r.Float64())
		ref[i] = logp[i] + r.NormFloat64()
	}
	for i := 0; i < B; i += 2 {
		w[i] = float64(i+1) / 16 // pair weights on the chosen rows
	}
	// Rounded to float32 first, so both sides start from the same values.
	logp, count, ref, w = f64(f32(logp)), f64(f32(count)), f64(f32(ref)), f64(f32(w))
	mlxtest.Run(t, func(t testing.TB) {
		for _, p := range []Preference{{Objective: DPO, Beta: 0.3}, {Objective: IPO, Beta: 0.5}, {Objective: SimPO, Beta: 2, Gamma: 0.7}, {Objective: ORPO, Lambda: 0.4}} {
			loss, aux := p.PairLoss(mlx.FromSlice(f32(logp), B), mlx.FromSlice(f32(count), B), mlx.FromSlice(f32(ref), B), mlx.FromSlice(f32(w), B))
			got, err := loss.Item()
			if err != nil {
				t.Fatal(err)
			}
			want, wantAux := hostPairLoss(p, logp, count, ref, w)
			if math.Abs(got-want) > 1e-5*math.Max(1, math.Abs(want)) {
				t.Errorf("%s: loss %.7g, host %.7g", p.Objective, got, want)
			}
			for k, a := range aux {
				v, err := a.Item()
				if err != nil {
					t.Fatal(err)
				}
				if math.Abs(v-wantAux[k]) > 1e-5*math.Max(1, math.Abs(wantAux[k])) {
					t.Errorf("%s: %s %.7g, host %.7g", p.Objective, PreferenceAux[k], v, wantAux[k])
				}
			}
		}
	})
}

// prefFixture is a tiny model and two microbatches' worth of pairs:
// 8 rows of 6 tokens, rows 2i and 2i+1 sharing a prompt and differing in
// their answers, whose masks count 1 to 4 targets.
func prefFixture(t testing.TB) (m *model.Transformer, xs, ys []int32, mask []float32) {
	t.Helper()
	m, err := model.New(model.Config{VocabSize: 32, DModel: 16, Layers: 1, Heads: 2, Context: 6})
	if err != nil {
		t.Fatal(err)
	}
	const B, T = 8, 6
	xs, ys, mask = make([]int32, B*T), make([]int32, B*T), make([]float32, B*T)
	for row := 0; row < B; row++ {
		prompt := 2 + (row/2)%2 // tokens of prompt
		for i := 0; i < T; i++ {
			tok := int32((row/2*7 + i*3) % 32)
			if i >= prompt {
				tok = int32((row*5 + i*11 + 1) % 32)
			}
			xs[row*T+i] = tok
		}
		for i := 0; i < T; i++ {
			if i+1 < T {
				ys[row*T+i] = xs[row*T+i+1]
			} else {
				ys[row*T+i] = int32((row*13 + 3) % 32)
			}
			if i+1 >= prompt && i < prompt+1+row%3 {
				mask[row*T+i] = 1
			}
		}
	}
	return m, xs, ys, mask
}

// pairWeights puts weight 1 on each pair's chosen row.
func pairWeights(rows int) []float32 {
	w := make([]float32, rows)
	for i := 0; i < rows; i += 2 {
		w[i] = 1
	}
	return w
}

// The gradient of each objective's loss of a full model matches central
// finite differences along a random direction and along the gradient.
func TestPreferenceGradientMatchesFiniteDifferences(t *testing.T) {
	m, xs, ys, mask := prefFixture(t)
	mlxtest.Run(t, func(t testing.TB) {
		params, err := m.Init(3)
		if err != nil {
			t.Fatal(err)
		}
		x, y, mk := mlx.FromSlice(xs[:24], 4, 6), mlx.FromSlice(ys[:24], 4, 6), mlx.FromSlice(mask[:24], 4, 6)
		w := mlx.FromSlice([]float32{0.5, 0, 0.5, 0}, 4)
		ref := mlx.FromSlice([]float32{-9, -11, -8, -10.5}, 4)
		r := rand.New(rand.NewPCG(5, 6))
		for _, p := range []Preference{{Objective: DPO, Beta: 0.5}, {Objective: IPO, Beta: 0.5}, {Objective: SimPO, Beta: 2, Gamma: 0.5}, {Objective: ORPO, Lambda: 0.5}} {
			loss := PreferenceLoss(m, p)
			rows := []*mlx.Array{w, ref}
			if !p.NeedsReference() {
				rows = rows[:1]
			}
			f := func(ps []*mlx.Array) *mlx.Array {
				l, _ := loss(ps, nil, step.Microbatch{X: x, Y: y, W: mk, Rows: rows})
				return l
			}
			argnums := make([]int, len(params))
			for i := range argnums {
				argnums[i] = i
			}
			vag, err := mlx.ValueAndGrad(func(in []*mlx.Array) ([]*mlx.Array, error) { return []*mlx.Array{f(in)}, nil }, argnums...)
			if err != nil {
				t.Fatal(err)
			}
			_, grads, err := vag.Call(params...)
			vag.Free()
			if err != nil {
				t.Fatal(err)
			}
			random := make([]*mlx.Array, len(params))
			var norm2 float64
			for i, g := range grads {
				v := make([]float32, g.Size())
				for j := range v {
					v[j] = float32(r.NormFloat64())
					norm2 += float64(v[j]) * float64(v[j])
				}
				random[i] = mlx.FromSlice(v, g.Shape()...)
			}
			gnorm := 0.0
			for _, g := range grads {
				s, _ := mlx.Sum(mlx.Square(g)).Item()
				gnorm += s
			}
			for name, dir := range map[string][]*mlx.Array{"random": random, "gradient": grads} {
				scale := 1 / math.Sqrt(norm2)
				if name == "gradient" {
					scale = 1 / math.Sqrt(gnorm)
				}
				analytic := 0.0
				for i, g := range grads {
					v, _ := mlx.Sum(mlx.Multiply(g, dir[i])).Item()
					analytic += v * scale
				}
				const eps = 1e-2
				at := func(sign float64) float64 {
					moved := make([]*mlx.Array, len(params))
					for i, p := range params {
						moved[i] = mlx.Add(p, mlx.MulScalar(dir[i], sign*eps*scale))
					}
					v, err := f(moved).Item()
					if err != nil {
						t.Fatal(err)
					}
					return v
				}
				numeric := (at(1) - at(-1)) / (2 * eps)
				if math.Abs(numeric-analytic) > 2e-2*math.Abs(analytic)+2e-4 {
					t.Errorf("%s along the %s direction: derivative %.6g, finite differences %.6g", p.Objective, name, analytic, numeric)
				}
			}
		}
	})
}

// A fine-tune's objective settings are checked: unknown objectives,
// hyperparameters of another objective or out of range, packing with
// pairs; unset ones take the objective's defaults.
func TestFineTuneObjectiveConfig(t *testing.T) {
	ok := Config{Base: "b", Train: "t.jsonl", Method: MethodFull}
	for _, c := range []struct {
		obj                 ObjectiveName
		beta, lambda, gamma float64
		pack                bool
		want                string // "" for valid
	}{
		{"", 0, 0, 0, false, ""},
		{SFT, 0, 0, 0, true, ""},
		{DPO, 0, 0, 0, false, ""},
		{SimPO, 2.5, 0, 0.3, false, ""},
		{ORPO, 0, 0.2, 0, false, ""},
		{"kto", 0, 0, 0, false, `objective "kto"`},
		{SFT, 0.1, 0, 0, false, "preference objectives only"},
		{DPO, -1, 0, 0, false, "beta = -1"},
		{DPO, 0, 0, 0.5, false, "gamma = 0.5 for dpo"},
		{IPO, 0, 0.5, 0, false, "lambda = 0.5 for ipo"},
		{ORPO, 0, -0.1, 0, false, "lambda = -0.1"},
		{ORPO, 0.5, 0, 0, false, "beta = 0.5, gamma = 0 for orpo"},
		{DPO, 0, 0, 0, true, "packing"},
	} {
		ft := ok
		ft.Objective, ft.Beta, ft.Lambda, ft.Gamma, ft.Pack = c.obj, c.beta, c.lambda, c.gamma, c.pack
		err := ft.Validate()
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s β %g λ %g γ %g pack %v: %v, want %q", c.obj, c.beta, c.lambda, c.gamma, c.pack, err, c.want)
		}
	}
	if p := (Config{Objective: SimPO, Beta: 3}).Preference(); p.Beta != 3 || p.Gamma != 1 {
		t.Errorf("SimPO with β 3: %+v, want β 3 and the default γ 1", p)
	}
	if p := (Config{Objective: DPO}).Preference(); p.Beta != 0.1 || !p.NeedsReference() {
		t.Errorf("DPO defaults: %+v, want β 0.1 and a reference", p)
	}
}
