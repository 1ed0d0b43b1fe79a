package finetune

import (
	"context"

	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/data/chattemplate"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/peft"
	"github.com/posttrainllm/posttrainllm/step"
	"github.com/posttrainllm/posttrainllm/train"
)

// Objective is what a fine-tune minimises and measures, as one unit: the
// rows it trains on, the form of its step's batch and the per-row inputs
// it needs (Layout), its loss and named auxiliary metrics inside the
// compiled step (Loss), and, for one run, what it prepares before the
// first update, the feed of its batches and its held-out evaluation
// (Start). The loop, the plan, checkpoints, hooks and data parallelism
// are the FineTuner's and the same for every objective. The built-in
// objectives are found by name (NewObjective, ObjectiveNames); another
// one is passed to NewWithObjective.
//
// An online objective fits the same shape: its Rows are prompts, its
// run's Next generates the answers with the current arrays
// (ObjectiveEnv.Current) and returns them as rows with per-row inputs
// (the old log-probabilities, the advantages) for a RowInputs step.
type Objective interface {
	// Name is the objective's name in flags and finetune.json.
	Name() string
	// Check refuses a run's settings the objective cannot train with (a
	// preference objective: an odd batch, which would split a pair).
	Check(cfg train.Config) error
	// Rows reads a jsonl file of the objective's records into rows of
	// src.Context targets; src.Training says whether they are the
	// training rows (packed when src.Pack) or held-out ones.
	Rows(src RowSource) (*data.Rows, error)
	// Layout is the step's batch form, its per-row inputs and the names
	// of its loss's auxiliary sums when it trains p; the array counts are
	// the FineTuner's to fill.
	Layout(p Policy) step.Layout
	// Loss is the step's loss of one microbatch when it trains p.
	Loss(p Policy) step.Loss
	// Start prepares one run: what the objective computes before the
	// first update (a full DPO fine-tune's reference log-probabilities,
	// from env.Base), the feed of its updates, and its evaluation. It
	// runs on the MLX thread before the step's state exists.
	Start(env ObjectiveEnv) (ObjectiveRun, error)
}

// ObjectiveRun is an objective's part of one fine-tune run.
type ObjectiveRun interface {
	// Next returns the next update's batch in the plan's shape
	// ([plan.Steps, plan.MicroBatch, rows' T]), with the weight total of
	// the whole update across the data-parallel ranks in WeightSum.
	Next() (step.Batch, error)
	// AppendState appends the feed's position after the last batch to b:
	// what a resumed run's ObjectiveEnv.SamplerState holds.
	AppendState(b []byte) []byte
	// Evaluate measures the held-out rows under the current trainable
	// and frozen arrays. Lead rank only, and only with held-out rows.
	Evaluate(trainable, frozen []*mlx.Array) (Eval, error)
	// Close releases what Start built.
	Close()
}

// Eval is what an objective's held-out evaluation measured: the loss the
// fine-tune reports as its held-out loss, the targets (Tokens) or rows
// (Rows: a preference objective's pairs) it averaged over, and the means
// of its named metrics (for a preference objective, PreferenceAux).
type Eval struct {
	Loss   float64
	Tokens int
	Rows   int
	Aux    map[string]float64
}

// RowSource is what Objective.Rows reads: the file, the base's
// tokenizer and chat template (nil for the built-in one), the row
// length, and the fine-tune's data settings.
type RowSource struct {
	Path       string
	Tokenizer  data.Tokenizer
	Template   *chattemplate.Template
	Context    int
	MaskPrompt bool
	Pack       bool
	Training   bool
}

// ObjectiveEnv is what an objective's Start is given.
type ObjectiveEnv struct {
	Policy Policy
	// Base are the base weights before the first update, in the model's
	// parameter order (quantized slots as the adapter's layout holds
	// them); read only, and only during Start.
	Base []*mlx.Array
	// BaseDir is the base checkpoint, RunDir the fine-tune's run folder.
	BaseDir, RunDir string
	// Train and Valid are the objective's rows (Rows); Valid may be nil.
	Train, Valid *data.Rows
	Config       train.Config
	Plan         train.Plan
	Group        *mlx.Group
	// SamplerState is a resumed run's feed position (AppendState), nil
	// for a fresh run.
	SamplerState []byte
	// Current returns the step's current trainable and frozen arrays,
	// owned by the state; valid from the first Next on.
	Current func() (trainable, frozen []*mlx.Array)
	// Context is the run's: cancelled, the run stops after the update
	// under way and checkpoints. Long work in Next (an online objective's
	// generation) returns early with its error.
	Context context.Context
}

// ObjectiveMetrics is an ObjectiveRun that measures the batches it makes
// (an online objective's rewards and generation times): the loop adds
// Metrics' values, the means since the previous call, to each log line's
// Aux.
type ObjectiveMetrics interface {
	Metrics() map[string]float64
}

// Lead reports whether this process is the run's lead rank, which
// evaluates and writes the run folder.
func (e ObjectiveEnv) Lead() bool { return e.Group.Rank() == 0 }

// Policy is the model a fine-tune trains as an objective's loss sees it:
// Model's forward pass over the step's trainable and frozen arrays,
// through Adapter's arrays applied unmerged to the frozen base when set
// (peft.Adapter.Linears), else over the model's parameters alone (a full
// fine-tune: all trainable, nothing frozen).
type Policy struct {
	Model   *model.Transformer
	Adapter *peft.Adapter
}

// Terms returns the policy's per-target cross-entropy and logsumexp
// ([B, T] each) of one microbatch (model.Transformer.LossTerms).
func (p Policy) Terms(trainable, frozen []*mlx.Array, x, y *mlx.Array) (ce, lse *mlx.Array) {
	if p.Adapter == nil {
		return p.Model.LossTerms(trainable, x, y)
	}
	return AdapterTerms(p.Model, p.Adapter, trainable, frozen, x, y)
}

// PackedTerms is Terms over packed rows, each position attending only
// within its segment seg.
func (p Policy) PackedTerms(trainable, frozen []*mlx.Array, x, y, seg *mlx.Array) (ce, lse *mlx.Array) {
	if p.Adapter == nil {
		return p.Model.PackedLossTerms(trainable, nil, x, y, seg)
	}
	lin, params, err := p.Adapter.Linears(frozen, trainable)
	if err != nil {
		return mlx.ErrorArray(err), mlx.ErrorArray(err)
	}
	return p.Model.PackedLossTerms(params, lin, x, y, seg)
}

// EvalTerms is Terms over the trainable arrays followed by the frozen
// ones in one list, the form an evaluation function takes.
func (p Policy) EvalTerms() train.TokenLossFunc {
	if p.Adapter == nil {
		return p.Model.LossTerms
	}
	nA := len(p.Adapter.Specs)
	return func(all []*mlx.Array, x, y *mlx.Array) (*mlx.Array, *mlx.Array) {
		return p.Terms(all[:nA], all[nA:], x, y)
	}
}

// WeightedTerms is Σ w·(CE + ZLoss·lse²) of Terms' outputs: the weighted
// token loss of a fine-tune (WeightedInputs).
func (p Policy) WeightedTerms(ce, lse, w *mlx.Array) *mlx.Array {
	return weightedTerms(p.Model, ce, lse, w)
}

// Logits returns the policy's logits [B, T, V] for tokens [B, T]: what an
// objective outside the built-in token losses builds its loss from.
func (p Policy) Logits(trainable, frozen []*mlx.Array, tokens *mlx.Array) *mlx.Array {
	if p.Adapter == nil {
		return p.Model.Logits(trainable, tokens)
	}
	lin, params, err := p.Adapter.Linears(frozen, trainable)
	if err != nil {
		return mlx.ErrorArray(err)
	}
	return p.Model.LogitsWith(params, lin, tokens)
}
