package finetune

import (
	"fmt"
	"regexp"
	"time"

	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/data/chattemplate"
	"github.com/posttrainllm/posttrainllm/generate"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/rl"
	"github.com/posttrainllm/posttrainllm/step"
	"github.com/posttrainllm/posttrainllm/train"
)

// GRPOName is Group Relative Policy Optimization (Shao et al. 2024), the
// online objective: each update samples GroupSize completions of its
// prompts from the policy being trained, scores them with rewards, and
// raises the log-probability of the completions that beat their group's
// mean (GRPOObjective).
const GRPOName ObjectiveName = "grpo"

// GRPO are the settings of a GRPO fine-tune, as TRL's GRPOConfig names
// them where it has them.
type GRPO struct {
	// Rollout is how completions are drawn: GroupSize per prompt (8), at
	// most MaxCompletion tokens each (256), at Temperature (1), TopP (1:
	// off) and TopK (0: off). Its Seed is the run's (train.Config.Seed).
	Rollout rl.RolloutOptions
	// Reward is the weighted sum of built-in rewards, "name[:weight],…"
	// (rl.ParseRewards; a fine-tune's default is "exact"); RewardCmd, when set, adds a
	// program's scores with weight 1 (rl.Program, run by sh -c, each run
	// bounded by RewardTimeout, default 60 s).
	Reward        string
	RewardCmd     string
	RewardTimeout time.Duration
	// AnswerField is the prompt record's field "exact" compares with
	// ("answer"); AnswerPattern and FormatPattern replace the built-in
	// rewards' patterns (rl.DefaultAnswerPattern, rl.DefaultFormatPattern).
	AnswerField, AnswerPattern, FormatPattern string
	// LossType normalises the per-token losses (rl.LossType; default dapo,
	// TRL's); Clip is the ratio's trust region, [1−Low, 1+High] (0.2 each
	// by default).
	LossType rl.LossType
	Clip     rl.Clip
	// Beta weighs the KL estimate to the reference model, the base
	// weights (0: no KL term and no reference pass).
	Beta float64
	// Iterations is how many updates reuse one batch of completions
	// (TRL's num_iterations; 1). Past the first, the ratio compares the
	// policy with the log-probabilities the engine sampled with.
	Iterations int
	// Scale is how advantages are scaled (rl.Scale; default group).
	Scale rl.Scale
	// MaskTruncated leaves completions that used their whole budget out
	// of the loss (DAPO's overlong filtering).
	MaskTruncated bool
}

// GRPOFrom reads a fine-tune's GRPO settings, each unset one at its
// default, and checks them.
func GRPOFrom(ft Config) (GRPO, error) {
	g := GRPO{
		Rollout: rl.RolloutOptions{GroupSize: ft.GroupSize, MaxCompletion: ft.MaxCompletion,
			Temperature: ft.Temperature, TopP: ft.TopP, TopK: ft.TopK},
		Reward: ft.Reward, RewardCmd: ft.RewardCmd, RewardTimeout: time.Duration(ft.RewardTimeout * float64(time.Second)),
		AnswerField: ft.AnswerField, AnswerPattern: ft.AnswerPattern, FormatPattern: ft.FormatPattern,
		LossType: rl.LossType(ft.LossType), Clip: rl.Clip{Low: ft.Epsilon, High: ft.EpsilonHigh}, Beta: ft.Beta,
		Iterations: ft.Iterations, Scale: rl.Scale(ft.ScaleRewards), MaskTruncated: ft.MaskTruncated,
	}
	if g.Reward == "" && g.RewardCmd == "" {
		g.Reward = "exact"
	}
	g = g.WithDefaults()
	return g, g.Validate()
}

// recordIn writes o's settings into ft's GRPO fields (and Beta), the
// inverse of GRPOFrom.
func (o *GRPOObjective) recordIn(ft *Config) {
	g, r := o.GRPO, o.GRPO.Rollout
	ft.GroupSize, ft.MaxCompletion, ft.Temperature, ft.TopP, ft.TopK = r.GroupSize, r.MaxCompletion, r.Temperature, r.TopP, r.TopK
	ft.Reward, ft.RewardCmd, ft.RewardTimeout = g.Reward, g.RewardCmd, g.RewardTimeout.Seconds()
	ft.AnswerField, ft.AnswerPattern, ft.FormatPattern = g.AnswerField, g.AnswerPattern, g.FormatPattern
	ft.LossType, ft.Epsilon, ft.EpsilonHigh, ft.Beta = string(g.LossType), g.Clip.Low, g.Clip.High, g.Beta
	ft.Iterations, ft.ScaleRewards, ft.MaskTruncated = g.Iterations, string(g.Scale), g.MaskTruncated
}

// WithDefaults fills g's unset settings with their defaults.
func (g GRPO) WithDefaults() GRPO {
	r := &g.Rollout
	r.GroupSize = orDefault(r.GroupSize, 8)
	r.MaxCompletion = orDefault(r.MaxCompletion, 256)
	if r.Temperature == 0 {
		r.Temperature = 1
	}
	if r.TopP == 0 {
		r.TopP = 1
	}
	if g.RewardTimeout == 0 {
		g.RewardTimeout = time.Minute
	}
	if g.LossType == "" {
		g.LossType = rl.LossDAPO
	}
	if g.Clip.Low == 0 {
		g.Clip.Low = 0.2
	}
	if g.Clip.High == 0 {
		g.Clip.High = g.Clip.Low
	}
	g.Iterations = orDefault(g.Iterations, 1)
	if g.Scale == "" {
		g.Scale = rl.ScaleGroup
	}
	return g
}

// orDefault is v, or def when v is 0.
func orDefault(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// Validate reports the first setting GRPO cannot train with.
func (g GRPO) Validate() error {
	if err := g.Rollout.Validate(); err != nil {
		return fmt.Errorf("grpo: %w", err)
	}
	if g.Rollout.Temperature <= 0 {
		return fmt.Errorf("grpo: temperature %g: want > 0 (a group of greedy completions is one completion %d times)", g.Rollout.Temperature, g.Rollout.GroupSize)
	}
	if _, err := rl.ParseLossType(string(g.LossType)); err != nil {
		return fmt.Errorf("grpo: %w", err)
	}
	if _, err := rl.ParseScale(string(g.Scale)); err != nil {
		return fmt.Errorf("grpo: %w", err)
	}
	if g.Clip.Low <= 0 || g.Clip.Low >= 1 || g.Clip.High <= 0 {
		return fmt.Errorf("grpo: epsilon %g, epsilon_high %g: want 0 < epsilon < 1 and epsilon_high > 0", g.Clip.Low, g.Clip.High)
	}
	if g.Beta < 0 {
		return fmt.Errorf("grpo: beta %g: want >= 0", g.Beta)
	}
	if g.Iterations < 1 {
		return fmt.Errorf("grpo: iterations %d: want >= 1", g.Iterations)
	}
	if g.RewardTimeout < 0 {
		return fmt.Errorf("grpo: reward timeout %v: want > 0", g.RewardTimeout)
	}
	_, err := g.rewards()
	return err
}

// rewards builds the weighted rewards the settings name.
func (g GRPO) rewards() ([]rl.Weighted, error) {
	opts := rl.BuiltinOptions{AnswerField: g.AnswerField, Budget: g.Rollout.MaxCompletion}
	var err error
	if opts.Extract, err = compilePattern("answer pattern", g.AnswerPattern); err != nil {
		return nil, err
	}
	if opts.Format, err = compilePattern("format pattern", g.FormatPattern); err != nil {
		return nil, err
	}
	var out []rl.Weighted
	if g.Reward != "" {
		if out, err = rl.ParseRewards(g.Reward, opts); err != nil {
			return nil, fmt.Errorf("grpo: %w", err)
		}
	}
	if g.RewardCmd != "" {
		out = append(out, rl.Weighted{Scorer: rl.Program("cmd", []string{"sh", "-c", g.RewardCmd}, g.RewardTimeout), Weight: 1})
	}
	return out, nil
}

// compilePattern compiles a reward's pattern; "" is nil (the default).
func compilePattern(what, pattern string) (*regexp.Regexp, error) {
	if pattern == "" {
		return nil, nil
	}
	re, err := regexp.Compile(pattern)
	if err != nil {
		return nil, fmt.Errorf("grpo: %s %q: %w", what, pattern, err)
	}
	return re, nil
}

// GRPOObjective is GRPO as a fine-tune objective. Its records are
// prompts (rl.ReadPrompts: "prompt" or "messages", any other fields for
// the rewards), rendered with the model's chat template. Each update
// draws GroupSize completions of each of its prompts from the batched
// generation engine running on the very arrays the step trains (merged
// with the adapters of a LoRA or DoRA fine-tune), scores them, and
// trains on them with rl.PolicyLoss: each completion's tokens weighted
// by its advantage over its group, with the prompt in context. An update
// of Batch × Accum rows holds Batch × Accum / GroupSize prompts; every
// rank of a data-parallel run draws its own prompts and scores its own
// groups. With Beta above 0 the reference is the base model: under
// adapters the same forward pass with the adapters off, inside the step;
// a full fine-tune keeps a copy of the base weights. The held-out
// evaluation answers each held-out prompt greedily and reports the mean
// rewards; its loss is the negated mean reward.
type GRPOObjective struct {
	GRPO
	// Rewards are Go reward functions (rl.FromFunc) scored beside those
	// the settings name: what a library user adds.
	Rewards []rl.Weighted
	// prompts are the records Rows read, training (true) and held out.
	prompts map[bool]*grpoPrompts
}

// grpoPrompts are one file's prompts with what Rows learnt of them.
type grpoPrompts struct {
	prompts   []rl.Prompt
	longest   int // tokens of the longest rendered prompt
	tokenizer data.Tokenizer
	template  *chattemplate.Template
}

// NewGRPOObjective returns the GRPO objective of settings g (their unset
// values at the defaults) with extra Go rewards.
func NewGRPOObjective(g GRPO, extra ...rl.Weighted) (*GRPOObjective, error) {
	g = g.WithDefaults()
	o := &GRPOObjective{GRPO: g, Rewards: extra}
	if g.Reward == "" && g.RewardCmd == "" && len(extra) == 0 {
		return nil, fmt.Errorf("grpo: no reward; name built-in ones (reward), a program (reward_cmd) or pass Go rewards")
	}
	if err := g.Validate(); err != nil {
		return nil, err
	}
	return o, nil
}

// newGRPOObjective is the registry's builder of GRPO.
func newGRPOObjective(ft Config) (Objective, error) {
	if ft.Pack {
		return nil, fmt.Errorf("objective grpo with packing: each completion is a row of its own; leave pack out")
	}
	if ft.Lambda != 0 || ft.Gamma != 0 {
		return nil, fmt.Errorf("orpo_lambda %g, simpo_gamma %g with objective grpo: they shape preference objectives only", ft.Lambda, ft.Gamma)
	}
	g, err := GRPOFrom(ft)
	if err != nil {
		return nil, err
	}
	return NewGRPOObjective(g)
}

// Name is "grpo".
func (o *GRPOObjective) Name() string { return string(GRPOName) }

// Settings are what a resumed run must match: the GRPO settings.
func (o *GRPOObjective) Settings() any { return o.GRPO }

// Check refuses an update whose rows do not split into whole groups.
func (o *GRPOObjective) Check(cfg train.Config) error {
	if rows, k := cfg.Batch*cfg.Accum, o.Rollout.GroupSize; rows%k != 0 {
		return fmt.Errorf("batch %d × accum %d = %d completions per update for objective grpo, want a multiple of the group size %d (each prompt's completions in one update)", cfg.Batch, cfg.Accum, rows, k)
	}
	return nil
}

// Rows reads the prompts of src.Path and renders them with the model's
// chat template. The rows hold the rendered prompts (no targets): their
// length is the longest prompt plus the completion budget, the length of
// the rows the step trains on, which must fit src.Context.
func (o *GRPOObjective) Rows(src RowSource) (*data.Rows, error) {
	prompts, err := rl.ReadPrompts(src.Path)
	if err != nil {
		return nil, err
	}
	gm := generate.NewModel(nil, nil, src.Tokenizer, src.Template, nil, nil)
	ids := make([][]int32, len(prompts))
	longest := 0
	for i, p := range prompts {
		if ids[i], err = rl.RenderPrompt(gm, p); err != nil {
			return nil, fmt.Errorf("%s: prompt %d: %w", src.Path, i+1, err)
		}
		longest = max(longest, len(ids[i]))
	}
	T := longest + o.Rollout.MaxCompletion - 1
	if T > src.Context {
		return nil, fmt.Errorf("%s: the longest prompt is %d tokens; with the completion budget of %d the rows are %d tokens, past the context of %d: shorten the prompts or the budget (max_completion)",
			src.Path, longest, o.Rollout.MaxCompletion, T, src.Context)
	}
	rows := &data.Rows{T: T, X: make([]int32, len(ids)*T), Y: make([]int32, len(ids)*T), W: make([]float32, len(ids)*T)}
	for i, p := range ids {
		copy(rows.X[i*T:], p)
	}
	if o.prompts == nil {
		o.prompts = map[bool]*grpoPrompts{}
	}
	o.prompts[src.Training] = &grpoPrompts{prompts: prompts, longest: longest, tokenizer: src.Tokenizer, template: src.Template}
	return rows, nil
}

// fullReference reports whether the step takes the reference
// log-probabilities as a position input: a full fine-tune with a KL term.
func (o *GRPOObjective) fullReference(p Policy) bool { return p.Adapter == nil && o.Beta > 0 }

// Layout is rows with each row's advantage as its row input, then as
// position inputs the sampling policy's log-probabilities (Iterations >
// 1) and a full fine-tune's reference log-probabilities (Beta > 0), and
// rl.PolicyAux's sums.
func (o *GRPOObjective) Layout(p Policy) step.Layout {
	l := step.Layout{Inputs: step.RowInputs, RowInputs: 1, Aux: rl.PolicyAux}
	if o.Iterations > 1 {
		l.PositionInputs++
	}
	if o.fullReference(p) {
		l.PositionInputs++
	}
	return l
}

// Loss is rl.PolicyLoss of the policy's log-probabilities of the rows'
// targets, computed with the prompts in context. With one iteration the
// ratio's denominator is the same log-probabilities under StopGradient
// (ratio 1, TRL's form); with more, the sampling policy's from the batch.
// The reference is the adapters-off forward pass under adapters, the
// batch's reference log-probabilities in a full fine-tune.
//
// Only a row's completion is scored, at most MaxCompletion positions
// from its first weighted one (completionSpan), and each group's prompt is
// run once for its GroupSize rows (completionTerms).
func (o *GRPOObjective) Loss(p Policy) step.Loss {
	return func(trainable, frozen []*mlx.Array, mb step.Microbatch) (*mlx.Array, []*mlx.Array) {
		at, weight := completionSpan(mb.W, o.Rollout.MaxCompletion)
		params, lin := trainable, model.Linears(nil)
		if p.Adapter != nil {
			var err error
			if lin, params, err = p.Adapter.Linears(frozen, trainable); err != nil {
				return mlx.ErrorArray(err), nil
			}
		}
		logp := mlx.Negative(o.completionTerms(p.Model, params, lin, mb, at))
		old, next := mlx.StopGradient(logp), 0
		if o.Iterations > 1 {
			old, next = mlx.TakeAlongAxis(mb.Positions[0], at, 1), 1
		}
		var ref *mlx.Array
		switch {
		case o.Beta == 0:
		case p.Adapter != nil:
			lin, params, err := p.Adapter.BaseLinears(frozen)
			if err != nil {
				return mlx.ErrorArray(err), nil
			}
			ref = mlx.StopGradient(mlx.Negative(o.completionTerms(p.Model, params, lin, mb, at)))
		default:
			ref = mlx.TakeAlongAxis(mb.Positions[next], at, 1)
		}
		return rl.PolicyLoss(logp, old, ref, mb.Rows[1], weight, o.Clip, o.Beta)
	}
}

// completionTerms returns the cross-entropy [B, C] of the microbatch's
// targets at positions at [B, C] (completionSpan's) under params and lin.
// A microbatch of whole groups (its rows a multiple of GroupSize: the
// rows of an update come group by group) runs each group's prompt once
// and its completions after it (model.Transformer.PrefixLossTerms), which
// spares the prompt's positions GroupSize − 1 times; any other scores row
// by row, the output head over the completions only (LossTermsAt).
func (o *GRPOObjective) completionTerms(m *model.Transformer, params []*mlx.Array, lin model.Linears, mb step.Microbatch, at *mlx.Array) *mlx.Array {
	B, T, C, K := mb.X.Dim(0), mb.X.Dim(1), at.Dim(1), o.Rollout.GroupSize
	if B%K != 0 || T <= C {
		ce, _ := m.LossTermsAt(params, lin, mb.X, mb.Y, at)
		return ce
	}
	// The rows hold their prompt from position 0 and the completion right
	// after it, so each row's first target position is its prompt's last
	// token and every prompt but its last token fits the first T − C.
	first, group := make([]int32, B/K), make([]int32, B)
	for r := range B {
		first[r/K], group[r] = int32(r/K*K), int32(r/K)
	}
	prompts := mlx.Slice(mlx.Take(mb.X, mlx.FromSlice(first, B/K), 0), []int{0, 0}, []int{B / K, T - C})
	start := mlx.Reshape(mlx.Slice(at, []int{0, 0}, []int{B, 1}), B)
	x, y := mlx.TakeAlongAxis(mb.X, at, 1), mlx.TakeAlongAxis(mb.Y, at, 1)
	ce, _ := m.PrefixLossTerms(params, lin, prompts, x, y, start, mlx.FromSlice(group, B))
	return ce
}

// completionSpan returns, for rows whose weights w [B, T] are nonzero on
// their completion's positions only, the n positions of each row from its
// first weighted one, at [B, n] (int32; past the row's end they repeat
// its last position), and the weights there, [B, n], zero where a
// position repeats. A row with no weighted position gets its first n
// positions, at weight zero. n at least T is every position in order.
func completionSpan(w *mlx.Array, n int) (at, weight *mlx.Array) {
	B, T := w.Dim(0), w.Dim(1)
	if n >= T {
		cols := mlx.Arange(0, float64(T), 1, mlx.Int32)
		return mlx.BroadcastTo(mlx.Reshape(cols, 1, T), B, T), w
	}
	first := mlx.Argmax(mlx.Greater(w, mlx.Scalar(0, w.Dtype())), 1, true) // [B, 1]: 0 for a row of zeros
	span := mlx.Add(mlx.AsType(first, mlx.Int32), mlx.Reshape(mlx.Arange(0, float64(n), 1, mlx.Int32), 1, n))
	inRow := mlx.Less(span, mlx.Scalar(float64(T), mlx.Int32))
	at = mlx.Minimum(span, mlx.Scalar(float64(T-1), mlx.Int32))
	weight = mlx.Multiply(mlx.TakeAlongAxis(w, at, 1), mlx.AsType(inRow, w.Dtype()))
	return at, weight
}
