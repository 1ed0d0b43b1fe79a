package finetune

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/posttrainllm/posttrainllm/checkpoint"
	"github.com/posttrainllm/posttrainllm/generate"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/peft"
	"github.com/posttrainllm/posttrainllm/rl"
	"github.com/posttrainllm/posttrainllm/step"
	"github.com/posttrainllm/posttrainllm/train"
)

// Start prepares a GRPO run: the rewards, the prompt order (resumed from
// env.SamplerState), the model's end tokens, and for a full fine-tune
// with a KL term a copy of the base weights as the reference. The
// generation engine starts on the first Next or Evaluate, over the arrays
// the step holds then.
func (o *GRPOObjective) Start(env ObjectiveEnv) (ObjectiveRun, error) {
	trainPrompts := o.prompts[true]
	if trainPrompts == nil {
		return nil, errors.New("grpo: no prompts; Rows reads them before Start")
	}
	rewards, err := o.GRPO.rewards()
	if err != nil {
		return nil, err
	}
	rewards = append(rewards, o.Rewards...)
	rows := env.Plan.Steps * env.Plan.MicroBatch
	if rows%o.Rollout.GroupSize != 0 {
		return nil, fmt.Errorf("grpo: an update of %d × %d rows does not split into groups of %d completions", env.Plan.Steps, env.Plan.MicroBatch, o.Rollout.GroupSize)
	}
	ends, err := generate.EndTokens(trainPrompts.tokenizer, trainPrompts.template, filepath.Join(checkpoint.RunDirOf(env.BaseDir), train.TokenizerDir))
	if err != nil {
		return nil, fmt.Errorf("grpo: %w", err)
	}
	r := &grpoRun{o: o, env: env, ctx: env.Context, rewards: rewards, rows: rows, train: trainPrompts, valid: o.prompts[false],
		ranks: env.Group.Size(), rank: env.Group.Rank(),
		gm: generate.NewModel(env.Policy.Model, nil, trainPrompts.tokenizer, trainPrompts.template, ends, nil)}
	if r.ctx == nil {
		r.ctx = context.Background()
	}
	r.opts = o.Rollout
	r.opts.Seed = env.Config.Seed
	if r.feed, err = newPromptFeed(len(trainPrompts.prompts), rows/o.Rollout.GroupSize, r.rank, r.ranks, env.Config.Seed, env.SamplerState); err != nil {
		return nil, err
	}
	if o.fullReference(env.Policy) {
		r.ref = make([]*mlx.Array, len(env.Base))
		for i, a := range env.Base {
			r.ref[i] = mlx.Copy(a)
		}
		if err := mlx.Eval(r.ref...); err != nil {
			mlx.Free(r.ref...)
			return nil, fmt.Errorf("grpo: reference weights: %w", err)
		}
	}
	return r, nil
}

// grpoRun is a GRPO fine-tune's run: its engine over the step's arrays,
// the prompt order, the batch of completions being trained on, and the
// rollout metrics since the last log line.
type grpoRun struct {
	o       *GRPOObjective
	env     ObjectiveEnv
	ctx     context.Context
	opts    rl.RolloutOptions
	rewards []rl.Weighted
	rows    int // completions per update on this rank
	train   *grpoPrompts
	valid   *grpoPrompts
	gm      *generate.Model
	feed    *promptFeed
	ranks   int
	rank    int

	engine *generate.Engine
	merged []*mlx.Array // arrays made for the engine (merged adapters), freed when replaced
	ref    []*mlx.Array // a full fine-tune's reference weights (Beta > 0)

	batch step.Batch // the completions being trained on
	iter  int        // updates of batch so far, mod Iterations
	rowW  []float32

	stats    grpoStats
	returned time.Time     // when Next last returned a fresh batch
	evalTime time.Duration // evaluation since then
}

// Next is the update's batch: fresh completions of the next prompts,
// drawn with the step's current arrays, or the previous batch again for
// the remaining Iterations.
func (r *grpoRun) Next() (step.Batch, error) {
	if r.iter > 0 {
		r.iter = (r.iter + 1) % r.o.Iterations
		return r.batch, nil
	}
	if err := r.collect(); err != nil {
		return step.Batch{}, err
	}
	r.iter = 1 % r.o.Iterations
	return r.batch, nil
}

// collect draws, scores and lays out the next batch of completions.
func (r *grpoRun) collect() error {
	start := time.Now()
	trainable, frozen := r.env.Current()
	if err := r.useArrays(trainable, frozen); err != nil {
		return err
	}
	stepTime := time.Since(start) // the engine's arrays wait for the update before
	if !r.returned.IsZero() {
		stepTime += start.Sub(r.returned) - r.evalTime
	}
	before := r.feed.st
	idx := r.feed.next()
	prompts := make([]rl.Prompt, len(idx))
	for i, j := range idx {
		prompts[i] = r.train.prompts[j]
	}
	opts := rl.UpdateOptions{Rollout: r.opts, Rewards: r.rewards, Scale: r.o.Scale, T: r.env.Train.T, MaskTruncated: r.o.MaskTruncated}
	u, err := rl.Collect(r.ctx, r.engine, r.gm, prompts, opts, (r.feed.st.Rollouts-1)*r.ranks+r.rank)
	if err == nil {
		err = r.layBatch(u)
	}
	if err != nil {
		r.feed.rewind(before) // the checkpoint taken on this error resumes with these prompts
		return err
	}
	r.stats.add(u.Stats, stepTime, r.returned.IsZero())
	r.returned, r.evalTime = time.Now(), 0
	return nil
}

// layBatch makes u's rows the step's batch: the token weights of the
// loss type over this rank's rows, scaled so that they add up over every
// rank as they would in one process, each row's advantage, and the
// position inputs the layout takes.
func (r *grpoRun) layBatch(u rl.Update) error {
	plan, rows := r.env.Plan, u.Rows
	w, err := rl.TokenWeights(r.o.LossType, rows.Mask, rows.N, rows.T, plan.MicroBatch, r.o.Rollout.MaxCompletion)
	if err != nil {
		return err
	}
	scale := 1 / float64(r.ranks)
	switch r.o.LossType {
	case rl.LossBNPO: // TokenWeights sums to the microbatches, which the step adds
		scale /= float64(plan.Steps)
	case rl.LossDAPO: // the denominator is every rank's completion tokens
		local := 0.0
		for _, m := range rows.Mask {
			local += float64(m)
		}
		global, err := allSumHost(r.env.Group, local)
		if err != nil {
			return err
		}
		if global > 0 {
			scale = local / global
		}
	}
	for i := range w {
		w[i] = float32(float64(w[i]) * scale)
	}
	if len(r.rowW) != rows.N {
		r.rowW = make([]float32, rows.N)
		for i := range r.rowW {
			r.rowW[i] = 1
		}
	}
	adv := make([]float32, rows.N)
	for i, a := range u.Advantages {
		adv[i] = float32(a)
	}
	b := step.Batch{X: rows.X, Y: rows.Y, W: w, N: plan.Steps, B: plan.MicroBatch, T: rows.T,
		RowW: r.rowW, WeightSum: float64(rows.N * r.ranks), RowInputs: [][]float32{adv}}
	if r.o.Iterations > 1 {
		b.PositionInputs = append(b.PositionInputs, rows.Old)
	}
	if r.ref != nil {
		ref, err := r.referenceLogProbs(rows)
		if err != nil {
			return err
		}
		b.PositionInputs = append(b.PositionInputs, ref)
	}
	r.batch = b
	return nil
}

// policyAdapter is the engine adapter that the rollouts of a LoRA or DoRA
// fine-tune over a float base decode through.
const policyAdapter = "policy"

// useArrays points the engine at the arrays the step holds now: a full
// fine-tune's trainable arrays themselves; under adapters over a float
// base, the frozen base with the adapters as the engine's adapter
// policyAdapter, which the rows decode through unmerged (no copy of the
// adapted weights); over a quantized base, the dequantized base merged
// with the adapters (peft.Adapter.Effective), made once per update. It
// starts the engine the first time.
func (r *grpoRun) useArrays(trainable, frozen []*mlx.Array) error {
	if a := r.env.Policy.Adapter; a != nil && a.Quant == nil {
		return r.useAdapter(a, trainable, frozen)
	}
	params, merged := trainable, []*mlx.Array(nil)
	if a := r.env.Policy.Adapter; a != nil {
		params = a.Effective(frozen, trainable)
		base := make(map[*mlx.Array]bool, len(frozen))
		for _, f := range frozen {
			base[f] = true
		}
		for _, p := range params {
			if !base[p] {
				merged = append(merged, p)
			}
		}
	}
	if err := mlx.Eval(params...); err != nil {
		mlx.Free(merged...)
		return fmt.Errorf("grpo: the policy's arrays: %w", err)
	}
	var err error
	if r.engine == nil {
		r.engine, err = generate.NewEngine(r.env.Policy.Model, params, generate.EngineOptions{MaxBatch: r.rows})
	} else {
		err = r.engine.SetParams(params)
	}
	if err != nil {
		mlx.Free(merged...)
		return fmt.Errorf("grpo: generation engine: %w", err)
	}
	mlx.Free(r.merged...)
	r.merged = merged
	return nil
}

// useAdapter is useArrays for adapters a over a float base: the engine
// runs on the frozen base, and the adapters' arrays of this update are
// set as its adapter policyAdapter, which the rollouts and evaluations
// name.
func (r *grpoRun) useAdapter(a *peft.Adapter, trainable, frozen []*mlx.Array) error {
	if err := mlx.Eval(trainable...); err != nil {
		return fmt.Errorf("grpo: the policy's adapters: %w", err)
	}
	if r.engine == nil {
		e, err := generate.NewEngine(r.env.Policy.Model, frozen, generate.EngineOptions{MaxBatch: r.rows})
		if err != nil {
			return fmt.Errorf("grpo: generation engine: %w", err)
		}
		r.engine = e
	}
	if err := r.engine.SetAdapter(policyAdapter, generate.Adapter{Spec: a, Params: trainable}); err != nil {
		return fmt.Errorf("grpo: generation engine: %w", err)
	}
	r.opts.Adapter = policyAdapter
	return nil
}

// referenceLogProbs returns the reference weights' log-probability of
// each target of rows, a microbatch at a time.
func (r *grpoRun) referenceLogProbs(rows rl.Rows) ([]float32, error) {
	out := make([]float32, 0, rows.N*rows.T)
	mb := r.env.Plan.MicroBatch
	for at := 0; at < rows.N; at += mb {
		n := min(mb, rows.N-at)
		err := func() error {
			s := mlx.NewScope()
			defer s.Close()
			x := mlx.FromSlice(rows.X[at*rows.T:(at+n)*rows.T], n, rows.T)
			y := mlx.FromSlice(rows.Y[at*rows.T:(at+n)*rows.T], n, rows.T)
			ce, _ := r.env.Policy.Model.LossTerms(r.ref, x, y)
			lp, err := mlx.AsType(mlx.Negative(ce), mlx.Float32).Float32s()
			out = append(out, lp...)
			return err
		}()
		if err != nil {
			return nil, fmt.Errorf("grpo: reference log-probabilities: %w", err)
		}
	}
	return out, nil
}

// allSumHost is v summed over the ranks of g.
func allSumHost(g *mlx.Group, v float64) (float64, error) {
	if g.Size() <= 1 {
		return v, nil
	}
	s := mlx.NewScope()
	defer s.Close()
	sum, err := mlx.AllSum(mlx.Scalar(v, mlx.Float32), g).Item()
	if err != nil {
		return 0, fmt.Errorf("grpo: completion tokens across ranks: %w", err)
	}
	return sum, nil
}

// AppendState appends the prompt order's position.
func (r *grpoRun) AppendState(b []byte) []byte { return r.feed.appendState(b) }

// Evaluate answers every held-out prompt greedily with the given arrays
// and scores the answers: the mean reward (negated, the held-out loss),
// each reward's mean and the answers' mean length.
func (r *grpoRun) Evaluate(trainable, frozen []*mlx.Array) (Eval, error) {
	start := time.Now()
	defer func() { r.evalTime += time.Since(start) }()
	if r.valid == nil {
		return Eval{}, errors.New("grpo: no held-out prompts")
	}
	if err := r.useArrays(trainable, frozen); err != nil {
		return Eval{}, err
	}
	prompts := r.valid.prompts
	streams := make([]*generate.Stream, len(prompts))
	for i, p := range prompts {
		ids, err := rl.RenderPrompt(r.gm, p)
		if err != nil {
			return Eval{}, fmt.Errorf("grpo: held-out prompt %d: %w", i+1, err)
		}
		ss, err := r.engine.Submit(r.ctx, generate.Sequence{Prompt: ids, N: 1, Options: generate.Options{
			Sampling: generate.Sampling{MaxTokens: r.o.Rollout.MaxCompletion}, StopTokens: r.gm.EndTokens}, Adapter: r.opts.Adapter})
		if err != nil {
			return Eval{}, fmt.Errorf("grpo: held-out prompt %d: %w", i+1, err)
		}
		streams[i] = ss[0]
	}
	items := make([]rl.Item, len(prompts))
	length, truncated := 0.0, 0.0
	for i, s := range streams {
		c, err := s.Wait()
		if err != nil {
			return Eval{}, fmt.Errorf("grpo: held-out prompt %d: %w", i+1, err)
		}
		trunc := c.FinishReason == generate.FinishLength
		items[i] = rl.Item{Prompt: prompts[i], Completion: rl.Completion{Text: r.gm.Tokenizer.Decode(c.Tokens), Tokens: len(c.Tokens), Truncated: trunc}}
		length += float64(len(c.Tokens))
		if trunc {
			truncated++
		}
	}
	scores, err := rl.Score(r.ctx, r.rewards, items)
	if err != nil {
		return Eval{}, fmt.Errorf("grpo: held-out rewards: %w", err)
	}
	n := float64(len(items))
	mean := 0.0
	for _, v := range scores.Total {
		mean += v / n
	}
	aux := map[string]float64{"reward": mean, "completion_len": length / n, "truncated": truncated / n}
	for name, vs := range scores.Each {
		m := 0.0
		for _, v := range vs {
			m += v / n
		}
		aux["reward/"+name] = m
	}
	return Eval{Loss: -mean, Rows: len(items), Aux: aux}, nil
}

// Metrics are the rollouts' means since the previous call.
func (r *grpoRun) Metrics() map[string]float64 { return r.stats.flush() }

// Close stops the engine and frees the arrays made for it and the
// reference weights.
func (r *grpoRun) Close() {
	if r.engine != nil {
		r.engine.Close()
	}
	mlx.Free(r.merged...)
	mlx.Free(r.ref...)
	r.merged, r.ref = nil, nil
}
