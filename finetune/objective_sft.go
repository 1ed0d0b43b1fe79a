package finetune

import (
	"fmt"

	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/step"
	"github.com/posttrainllm/posttrainllm/train"
)

// SupervisedObjective is supervised fine-tuning (SFT): the cross-entropy
// (plus the model's z-loss term) of the counted targets of chat or text
// records, the mean over the counted targets of each whole update. With
// Pack the training rows hold several examples each, every one attending
// only within itself (PackedInputs); held-out rows hold one example each.
// Its held-out evaluation is the loss over the first train.Config.EvalTokens
// positions of the held-out rows.
type SupervisedObjective struct {
	Pack bool
}

// newSupervisedObjective is the registry's builder of SFT, which takes
// no hyperparameters.
func newSupervisedObjective(ft Config) (Objective, error) {
	if ft.Beta != 0 || ft.Lambda != 0 || ft.Gamma != 0 {
		return nil, fmt.Errorf("beta %g, orpo_lambda %g, simpo_gamma %g with objective sft: they shape preference objectives only", ft.Beta, ft.Lambda, ft.Gamma)
	}
	return SupervisedObjective{Pack: ft.Pack}, nil
}

// Name is "sft".
func (SupervisedObjective) Name() string { return string(SFT) }

// Check accepts any run.
func (SupervisedObjective) Check(train.Config) error { return nil }

// Rows renders the records of src.Path with the model's chat template
// (LoadTemplateRows), packed for training when Pack is set.
func (o SupervisedObjective) Rows(src RowSource) (*data.Rows, error) {
	return LoadTemplateRows(src.Path, src.Tokenizer, src.Template, src.Context, src.MaskPrompt, o.Pack && src.Training)
}

// Layout is weighted tokens, packed with Pack; no auxiliary sums.
func (o SupervisedObjective) Layout(Policy) step.Layout {
	if o.Pack {
		return step.Layout{Inputs: step.PackedInputs}
	}
	return step.Layout{Inputs: step.WeightedInputs}
}

// Loss is Σ w·(CE + ZLoss·lse²) of the policy over the microbatch.
func (o SupervisedObjective) Loss(p Policy) step.Loss {
	if o.Pack {
		return func(trainable, frozen []*mlx.Array, mb step.Microbatch) (*mlx.Array, []*mlx.Array) {
			ce, lse := p.PackedTerms(trainable, frozen, mb.X, mb.Y, mb.Seg)
			return p.WeightedTerms(ce, lse, mb.W), nil
		}
	}
	return func(trainable, frozen []*mlx.Array, mb step.Microbatch) (*mlx.Array, []*mlx.Array) {
		ce, lse := p.Terms(trainable, frozen, mb.X, mb.Y)
		return p.WeightedTerms(ce, lse, mb.W), nil
	}
}

// Start draws the training rows (NewRowFeed) and, on the lead rank,
// builds the held-out evaluation.
func (o SupervisedObjective) Start(env ObjectiveEnv) (ObjectiveRun, error) {
	feed, err := NewRowFeed(env)
	if err != nil {
		return nil, err
	}
	run := &supervisedRun{RowFeed: feed, valid: env.Valid, cfg: env.Config}
	if env.Lead() {
		if run.eval, err = train.NewEvalFunc(env.Policy.EvalTerms(), env.Config.Compile); err != nil {
			return nil, err
		}
	}
	return run, nil
}

// supervisedRun is SFT's part of a run: the rows' feed as it is, and the
// held-out loss over the counted targets.
type supervisedRun struct {
	*RowFeed
	valid *data.Rows
	cfg   train.Config
	eval  *train.EvalFunc // lead rank only
}

// Evaluate is the loss over the counted targets of the first
// train.Config.EvalTokens positions of the held-out rows.
func (r *supervisedRun) Evaluate(trainable, frozen []*mlx.Array) (Eval, error) {
	params := append(append([]*mlx.Array{}, trainable...), frozen...)
	v, err := train.EvaluateRows(r.eval, params, r.valid, r.cfg.Batch, r.cfg.EvalTokens)
	if err != nil {
		return Eval{}, err
	}
	return Eval{Loss: v.Loss, Tokens: v.Tokens}, nil
}

// Close releases the evaluation function.
func (r *supervisedRun) Close() {
	if r.eval != nil {
		r.eval.Free()
	}
}
