package finetune

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/posttrainllm/posttrainllm/checkpoint"
	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/data/chattemplate"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/peft"
	"github.com/posttrainllm/posttrainllm/train"
)

// FineTuner fine-tunes a checkpoint on jsonl records. It runs the
// pretrain.Trainer's loop (the same logging, metrics, hooks, signals, divergence
// checks, micro-batch plan and data parallelism) with the step of its
// Objective over the base weights: with adapters the base weights are
// frozen inputs and the optimizer holds state for the adapters alone. Its
// checkpoints hold the trainable arrays and finetune.json.
type FineTuner struct {
	// Config is the run: steps, batch, accum, optimizer, schedule, logging
	// and checkpoints. Its Model and Tokenizer are the base checkpoint's.
	Config   train.Config
	FineTune Config
	// Objective is what the fine-tune minimises and measures; its name is
	// FineTune.Objective.
	Objective Objective
	Model     *model.Transformer
	// Train and Valid are the rendered records; Valid may be nil.
	Train, Valid *data.Rows
	RunDir       string
	Hooks        train.Hooks
	// Group is the data-parallel group this process is a rank of; nil (or
	// size 1) fine-tunes alone. As with a pretrain.Trainer's Group, every rank
	// starts from the same base and adapters and trains on its shard of
	// each update's rows (data.RowSampler.Shard with Config.Batch rows), so
	// an update covers Size() × Batch × Accum rows, and its loss is the
	// mean over the counted targets of all of them. Rank 0 alone
	// evaluates, writes the run folder and calls the Hooks (train.Hooks).
	Group *mlx.Group
}

// New reads the base checkpoint's model and tokenizer into cfg,
// renders the records of ft.Train (and ft.Valid) into the rows of the
// built-in objective ft names (NewObjective), and checks everything
// before anything is written. ft.Base may name a run folder: it becomes
// its newest checkpoint (checkpoint.Resolve).
func New(cfg train.Config, ft Config, runDir string) (*FineTuner, error) {
	obj, err := NewObjective(ft)
	if err != nil {
		return nil, err
	}
	return NewWithObjective(cfg, ft, obj, runDir)
}

// NewWithObjective is New for objective obj, built in or
// not; ft.Objective becomes its name, which the checkpoints record.
func NewWithObjective(cfg train.Config, ft Config, obj Objective, runDir string) (*FineTuner, error) {
	if obj == nil {
		return nil, errors.New("finetune: no objective")
	}
	ft.Objective = ObjectiveName(obj.Name())
	if r, ok := obj.(configRecorder); ok {
		r.recordIn(&ft)
	}
	if err := ft.validateRun(); err != nil {
		return nil, err
	}
	base, err := checkpoint.Resolve(ft.Base)
	if err != nil {
		return nil, fmt.Errorf("base: %w", err)
	}
	ft.Base = base
	st, err := train.ReadRunState(filepath.Join(ft.Base, checkpoint.StateFile))
	if err != nil {
		return nil, fmt.Errorf("base checkpoint %s: %w", ft.Base, err)
	}
	cfg.Model, cfg.Tokenizer = st.Config.Model, st.Config.Tokenizer
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := obj.Check(cfg); err != nil {
		return nil, err
	}
	if cfg.Optimizer == "galore" || cfg.Optimizer == "sophia" {
		return nil, fmt.Errorf("finetune: optimizer %q refreshes its projections or Hessian estimate beside the pretraining step only; use adamw, lion, adafactor, muon or sgd", cfg.Optimizer)
	}
	m, err := model.New(cfg.Model)
	if err != nil {
		return nil, err
	}
	m.Memory = cfg.ModelMemory()
	if ft.UsesAdapter() {
		if _, err := peft.New(ft.Adapter(), m.Specs); err != nil {
			return nil, err
		}
	}
	tok, err := train.OpenRunTokenizer(ft.Tokenizers, cfg, checkpoint.RunDirOf(ft.Base))
	if err != nil {
		return nil, fmt.Errorf("base checkpoint %s: %w", ft.Base, err)
	}
	rowLen := cfg.Model.Context
	if ft.Context > rowLen {
		return nil, fmt.Errorf("context = %d, want at most the base model's context, %d", ft.Context, rowLen)
	} else if ft.Context > 0 {
		rowLen = ft.Context
	}
	tmpl, err := train.RunTemplate(checkpoint.RunDirOf(ft.Base))
	if err != nil {
		return nil, fmt.Errorf("base checkpoint %s: %w", ft.Base, err)
	}
	f := &FineTuner{Config: cfg, FineTune: ft, Objective: obj, Model: m, RunDir: runDir}
	src := RowSource{Path: ft.Train, Tokenizer: tok, Template: tmpl, Context: rowLen, MaskPrompt: ft.MaskPrompt, Pack: ft.Pack, Training: true}
	if f.Train, err = obj.Rows(src); err != nil {
		return nil, err
	}
	if ft.Valid != "" {
		// Held-out rows hold one example each: with document masking a
		// packed example's terms are those it has alone.
		src.Path, src.Training = ft.Valid, false
		if f.Valid, err = obj.Rows(src); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// TokensPerStep is the token positions one update of one rank covers:
// batch × accum rows of the fine-tune's row length
// (Config.Context).
func (f *FineTuner) TokensPerStep() int { return f.Config.Batch * f.Config.Accum * f.Train.T }

// Run fine-tunes from the base checkpoint, or from the fine-tune
// checkpoint directory resumeFrom, until Config.Steps updates are done or
// ctx is cancelled (then it writes a checkpoint and returns
// train.ErrInterrupted). It is the Trainer's loop (train.RunLoop) with the
// fine-tune's step, rows, evaluation and checkpoints. It runs on the MLX
// thread, and so do the Hooks.
func (f *FineTuner) Run(ctx context.Context, resumeFrom string) (train.Summary, error) {
	env := train.TaskEnv{Config: f.Config, RunDir: f.RunDir, ResumeFrom: resumeFrom, Group: f.Group}
	return train.RunLoop(ctx, &fineTuneTask{f: f}, env, f.Hooks)
}

// LoadRows reads a jsonl file of records and renders them with the
// built-in chat template into rows of context targets (data.Render,
// data.BuildRows).
func LoadRows(path string, tok data.Tokenizer, context int, maskPrompt, pack bool) (*data.Rows, error) {
	return LoadTemplateRows(path, tok, nil, context, maskPrompt, pack)
}

// LoadTemplateRows is LoadRows with chat records rendered by the model's
// own template tmpl (nil for the built-in one): see renderRecord.
func LoadTemplateRows(path string, tok data.Tokenizer, tmpl *chattemplate.Template, context int, maskPrompt, pack bool) (*data.Rows, error) {
	recs, err := data.ReadRecords(path)
	if err != nil {
		return nil, err
	}
	exs := make([]data.Example, len(recs))
	for i, r := range recs {
		if exs[i], err = renderRecord(r, tok, tmpl, maskPrompt); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	rows, err := data.BuildRows(exs, context, tok.EOT(), pack)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return rows, nil
}

// renderRecord renders one fine-tuning record: a chat record with the
// model's template when there is one (chattemplate.Template.Encode), every
// other record, and chat records of runs without a template, with the
// built-in one (data.Render).
func renderRecord(rec data.Record, tok data.Tokenizer, tmpl *chattemplate.Template, maskPrompt bool) (data.Example, error) {
	if tmpl == nil || rec.Kind != data.ChatRecord {
		return data.Render(rec, tok, maskPrompt), nil
	}
	ex, err := tmpl.Encode(rec.Messages, tok, maskPrompt)
	if err != nil {
		return ex, fmt.Errorf("line %d: %w", rec.Line, err)
	}
	return ex, nil
}
