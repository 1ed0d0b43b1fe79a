package finetune

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/step"
	"github.com/posttrainllm/posttrainllm/train"
)

// PreferenceObjective is the DPO family's Objective (DPO, IPO, ORPO,
// SimPO: Preference): a loss over pairs of answers to one prompt, rows 2i
// chosen and 2i+1 rejected, with the rewards, margin and accuracy
// (PreferenceAux) as auxiliary metrics of the step. A full DPO or IPO
// fine-tune compares the policy with the base weights' log-probabilities,
// computed once before the first update and saved in the run folder
// (ReferenceFile); under adapters the step computes them itself, with the
// adapters switched off.
type PreferenceObjective struct {
	Preference
}

// newPreferenceObjective is the registry's builder of the DPO family.
func newPreferenceObjective(ft Config) (Objective, error) {
	p := Preference{Objective: ft.Objective, Beta: ft.Beta, Lambda: ft.Lambda, Gamma: ft.Gamma}.WithDefaults()
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if ft.Pack {
		return nil, fmt.Errorf("objective %s with packing: a preference pair's answers are compared whole, one row each; leave pack out", ft.Objective)
	}
	return PreferenceObjective{p}, nil
}

// Name is the objective's: dpo, ipo, orpo or simpo.
func (o PreferenceObjective) Name() string { return string(o.Objective) }

// Check refuses an odd batch, which would split a pair.
func (o PreferenceObjective) Check(cfg train.Config) error {
	if cfg.Batch%2 != 0 {
		return fmt.Errorf("batch = %d for objective %s, want an even number of rows: each pair's chosen and rejected answers side by side", cfg.Batch, o.Objective)
	}
	return nil
}

// Rows reads the preference pairs of src.Path (LoadPairRows).
func (o PreferenceObjective) Rows(src RowSource) (*data.Rows, error) {
	return LoadPairRows(src.Path, src.Tokenizer, src.Template, src.Context)
}

// fullReference reports whether the step takes the reference
// log-probabilities as a row input: a full DPO or IPO fine-tune's.
func (o PreferenceObjective) fullReference(p Policy) bool {
	return p.Adapter == nil && o.NeedsReference()
}

// Layout is rows with PreferenceAux's sums, and the reference
// log-probabilities as a row input where the step does not compute them.
func (o PreferenceObjective) Layout(p Policy) step.Layout {
	l := step.Layout{Inputs: step.RowInputs, Aux: PreferenceAux}
	if o.fullReference(p) {
		l.RowInputs = 1
	}
	return l
}

// Loss is PreferenceLoss of a full fine-tune, AdapterPreferenceLoss under
// adapters.
func (o PreferenceObjective) Loss(p Policy) step.Loss {
	if p.Adapter == nil {
		return PreferenceLoss(p.Model, o.Preference)
	}
	return AdapterPreferenceLoss(p.Model, p.Adapter, o.Preference)
}

// Start computes (or reads) a full DPO or IPO fine-tune's reference
// log-probabilities, refuses an odd micro-batch, and builds the feed of
// pairs and, on the lead rank, the held-out evaluation of pairs.
func (o PreferenceObjective) Start(env ObjectiveEnv) (ObjectiveRun, error) {
	run := &preferenceRun{valid: env.Valid, batch: env.Config.Batch}
	if o.fullReference(env.Policy) {
		refs, err := references(env)
		if err != nil {
			return nil, fmt.Errorf("reference: %w", err)
		}
		run.refs, run.validRefs = refs.Train, refs.Valid
	}
	if env.Plan.MicroBatch%2 != 0 {
		return nil, fmt.Errorf("micro-batch %d for objective %s, want an even number of rows (each pair's answers side by side)", env.Plan.MicroBatch, o.Objective)
	}
	var err error
	if run.rows, err = NewRowFeed(env); err != nil {
		return nil, err
	}
	run.ranks, run.loss, run.compile = env.Group.Size(), o.Loss(env.Policy), env.Config.Compile
	return run, nil
}

// preferenceRun feeds a preference fine-tune: the rows of its RowFeed
// (pairs drawn whole), each pair's weight on its chosen row, the
// reference log-probabilities of the rows where the step takes them, and
// the update's pair count across every rank as the weight total, so each
// rank's loss is its share of the mean over the whole update's pairs.
type preferenceRun struct {
	rows      *RowFeed
	refs      []float32 // per training row; nil without
	validRefs []float32
	ranks     int
	rowW, ref []float32
	valid     *data.Rows
	batch     int
	loss      step.Loss
	compile   bool
	eval      *PairEvaluator // built by the first Evaluate
}

// Next is the next update's batch with its row weights and inputs.
func (r *preferenceRun) Next() (step.Batch, error) {
	b, err := r.rows.Next()
	if err != nil {
		return step.Batch{}, err
	}
	idx := r.rows.Index()
	if len(r.rowW) != len(idx) {
		r.rowW = make([]float32, len(idx))
	}
	for k, i := range idx {
		r.rowW[k] = float32(1 - i%2) // 1 on a pair's chosen row (2i), 0 on its rejected one
	}
	b.RowW = r.rowW
	b.WeightSum = float64(len(idx) * r.ranks / 2)
	if r.refs != nil {
		if len(r.ref) != len(idx) {
			r.ref = make([]float32, len(idx))
		}
		for k, i := range idx {
			r.ref[k] = r.refs[i]
		}
		b.RowInputs = [][]float32{r.ref}
	}
	return b, nil
}

// AppendState is the row feed's.
func (r *preferenceRun) AppendState(b []byte) []byte { return r.rows.AppendState(b) }

// Evaluate measures the preference loss, rewards and accuracy of the
// held-out pairs.
func (r *preferenceRun) Evaluate(trainable, frozen []*mlx.Array) (Eval, error) {
	if r.eval == nil {
		var err error
		if r.eval, err = NewPairEvaluator(r.loss, len(trainable), len(frozen), r.compile); err != nil {
			return Eval{}, err
		}
	}
	v, err := r.eval.Run(trainable, frozen, r.valid, r.validRefs, r.batch)
	if err != nil {
		return Eval{}, err
	}
	return Eval{Loss: v.Loss, Rows: v.Pairs, Aux: v.aux()}, nil
}

// Close releases the evaluation.
func (r *preferenceRun) Close() { r.eval.Free() }

// references returns the reference log-probabilities of a full DPO or IPO
// fine-tune's training and validation rows under the base weights
// env.Base: read from the run folder when it holds them for these rows
// and this base (a resumed run), else computed in one pass and, on the
// lead rank, written there (ReferenceFile), so that a resumed run reuses
// them rather than run the pass again.
func references(env ObjectiveEnv) (References, error) {
	want := References{Base: env.BaseDir, TrainRows: RowsFingerprint(env.Train), ValidRows: RowsFingerprint(env.Valid)}
	refs, err := ReadReferences(env.RunDir, want, env.Train, env.Valid)
	if err == nil {
		return refs, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return References{}, err
	}
	refs = want
	terms := env.Policy.Model.LossTerms
	if refs.Train, err = ReferenceLogProbs(terms, env.Base, env.Train, env.Config.Batch, env.Config.Compile); err != nil {
		return References{}, fmt.Errorf("training rows: %w", err)
	}
	if env.Valid != nil {
		if refs.Valid, err = ReferenceLogProbs(terms, env.Base, env.Valid, env.Config.Batch, env.Config.Compile); err != nil {
			return References{}, fmt.Errorf("validation rows: %w", err)
		}
	}
	if env.Lead() {
		if err := WriteReferences(env.RunDir, refs); err != nil {
			return References{}, err
		}
	}
	return refs, nil
}
