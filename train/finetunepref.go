package train

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/data/chattemplate"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/peft"
)

// The preference objectives of a fine-tune (FineTuneConfig.Objective):
// their row step's loss, the feed that adds the row inputs to the rows'
// batches, the reference log-probabilities of a full fine-tune, and the
// metrics the loop logs.

// loadPairs reads a preference fine-tune's training (and validation)
// pairs into rows of rowLen targets (LoadPairRows), after checking that
// a batch holds whole pairs.
func (f *FineTuner) loadPairs(tok data.Tokenizer, tmpl *chattemplate.Template, rowLen int) error {
	ft := f.FineTune
	if f.Config.Batch%2 != 0 {
		return fmt.Errorf("batch = %d for objective %s, want an even number of rows: each pair's chosen and rejected answers side by side", f.Config.Batch, ft.Objective)
	}
	var err error
	if f.Train, err = LoadPairRows(ft.Train, tok, tmpl, rowLen); err != nil {
		return err
	}
	if ft.Valid != "" {
		if f.Valid, err = LoadPairRows(ft.Valid, tok, tmpl, rowLen); err != nil {
			return err
		}
	}
	return nil
}

// preferenceObjective is the objective of a preference fine-tune of m
// through adapters a (nil for a full fine-tune): the row loss, and how
// many row inputs it takes after the row weights (1, the precomputed
// reference, for a full fine-tune's DPO and IPO; the adapters' reference
// is computed in the step).
func preferenceObjective(m *model.TinyGPT, a *peft.Adapter, p Preference) fineTuneObjective {
	if a == nil {
		inputs := 0
		if p.NeedsReference() {
			inputs = 1
		}
		return fineTuneObjective{rowLoss: PreferenceLoss(m, p), rowInputs: inputs, evalTerms: m.LossTerms}
	}
	return fineTuneObjective{rowLoss: AdapterPreferenceLoss(m, a, p)}
}

// pairFeed feeds a preference fine-tune: the rows of its rowFeed (pairs
// drawn whole), each pair's weight on its chosen row, the reference
// log-probabilities of the rows where the step takes them, and the
// update's pair count across every rank as the weight total, so each
// rank's loss is its share of the mean over the whole update's pairs.
type pairFeed struct {
	rows  *rowFeed
	refs  []float32 // per row of the training rows; nil without
	ranks int
	rowW  []float32
	ref   []float32
}

// next is the next update's batch with its row weights and inputs.
func (f *pairFeed) next() (Batch, error) {
	b, err := f.rows.next()
	if err != nil {
		return Batch{}, err
	}
	idx := f.rows.batch.Index
	if len(f.rowW) != len(idx) {
		f.rowW = make([]float32, len(idx))
	}
	for k, r := range idx {
		f.rowW[k] = float32(1 - r%2) // 1 on a pair's chosen row (2i), 0 on its rejected one
	}
	b.RowW = f.rowW
	b.WeightSum = float64(len(idx) * f.ranks / 2)
	if f.refs != nil {
		if len(f.ref) != len(idx) {
			f.ref = make([]float32, len(idx))
		}
		for k, r := range idx {
			f.ref[k] = f.refs[r]
		}
		b.RowInputs = [][]float32{f.ref}
	}
	return b, nil
}

// appendState is the row feed's.
func (f *pairFeed) appendState(b []byte) []byte { return f.rows.appendState(b) }

// fineTuneReferences returns the reference log-probabilities of a full
// DPO or IPO fine-tune's training and validation rows under the base
// weights base: read from the run folder when it holds them for these
// rows and this base (a resumed run), else computed in one pass and, on
// the lead rank, written there (ReferenceFile), so that a resumed run
// reuses them rather than run the pass again.
func (k *fineTuneTask) fineTuneReferences(env taskEnv, base []*mlx.Array) (References, error) {
	f := k.f
	want := References{Base: f.FineTune.Base, TrainRows: RowsFingerprint(f.Train), ValidRows: RowsFingerprint(f.Valid)}
	refs, err := ReadReferences(env.runDir, want, f.Train, f.Valid)
	if err == nil {
		return refs, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return References{}, err
	}
	refs = want
	if refs.Train, err = ReferenceLogProbs(f.Model.LossTerms, base, f.Train, env.cfg.Batch, env.cfg.Compile); err != nil {
		return References{}, fmt.Errorf("training rows: %w", err)
	}
	if f.Valid != nil {
		if refs.Valid, err = ReferenceLogProbs(f.Model.LossTerms, base, f.Valid, env.cfg.Batch, env.cfg.Compile); err != nil {
			return References{}, fmt.Errorf("validation rows: %w", err)
		}
	}
	if env.lead() {
		if err := WriteReferences(env.runDir, refs); err != nil {
			return References{}, err
		}
	}
	return refs, nil
}

// evaluatePairs measures the preference loss, rewards and accuracy of the
// held-out pairs into m, returning the loss.
func (k *fineTuneTask) evaluatePairs(m *Metrics) (float64, error) {
	v, err := k.pairEval.Run(k.state.Params(), k.state.Frozen(), k.f.Valid, k.refs.Valid, k.cfg.Batch)
	if err != nil {
		return 0, err
	}
	m.ValLoss, m.ValPreference = &v.Loss, &v
	return v.Loss, nil
}

// intervalPreference is the training pairs' preference metrics since the
// last log line (State.IntervalAux) over pairs pairs, for a preference
// step; nil for any other step.
func intervalPreference(step *Step, st *State, pairs float64) *PreferenceEval {
	aux := st.IntervalAux()
	if step.Aux() != len(PreferenceAux) || len(aux) != len(PreferenceAux) {
		return nil
	}
	return &PreferenceEval{RewardChosen: aux[0], RewardRejected: aux[1], Margin: aux[2], Accuracy: aux[3], Pairs: int(pairs)}
}
