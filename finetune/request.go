package finetune

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/posttrainllm/posttrainllm/checkpoint"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/peft"
	"github.com/posttrainllm/posttrainllm/train"
)

// Request is what a fine-tune's user asked for, before any policy: a
// fresh fine-tune of the base From, or the resume of the fine-tune
// Resume, with the settings given. NewPlan decides what runs.
type Request struct {
	// From is the base checkpoint as given: a run folder (its newest
	// checkpoint) or a checkpoint directory. A resume may repeat it.
	From string
	// Resume is the fine-tune to continue, a run folder or a checkpoint
	// directory; "" starts a fresh one from From.
	Resume string
	// Settings are the fine-tune's settings as given, defaults included:
	// Train and Valid are paths as given (made absolute by the plan), Base
	// is ignored (From names the base), an Objective of "" or sft is the
	// supervised loss.
	Settings Config
	// Set are the finetune.json keys (base, train, method, rank, context
	// ...: those of the saved settings Settings lists) of the settings
	// the user set explicitly (Given records one): a resume refuses any of them that differs from
	// the resumed fine-tune's, and a fresh fine-tune refuses GRPO's
	// settings set for another objective.
	Set []string
	// Epochs, when EpochsSet, is the number of passes over the training
	// sequences the run's steps derive from (FineTuner.SetEpochs).
	Epochs    float64
	EpochsSet bool
	// StepsSet is whether the user set the run's steps.
	StepsSet bool
	// Optimizer is the optimizer the user set, "" when none.
	Optimizer string
}

// Plan is a validated Request: the fine-tune's settings, the run's
// settings before the caller's own overrides, and the checkpoint a
// resume continues.
type Plan struct {
	// FineTune is the fine-tune's Config: a fresh one's from the request,
	// a resumed one's as it saved it (finetune.json).
	FineTune Config
	// Run is the run's train.Config before the caller applies the user's
	// run settings: Defaults over the base's for a fresh fine-tune, the
	// resumed run's own for a resume.
	Run train.Config
	// Checkpoint is the resumed checkpoint directory, "" for a fresh
	// fine-tune; Step is its step.
	Checkpoint string
	Step       int
	// Epochs is the passes over the training sequences the steps derive
	// from (FineTuner.SetEpochs) once the rows are read; 0 keeps the
	// run's steps.
	Epochs float64
}

// NewPlan decides what a Request runs. A resume reads the fine-tune's
// state and settings and refuses any set setting that differs from
// them (a resumed fine-tune keeps its objective, method, base, data,
// context ...), another optimizer, and epochs (it keeps its steps). A
// fresh fine-tune needs a base and training records, refuses a full
// fine-tune or quantize over a quantized base and a context beyond the
// base model's, and starts from Defaults. Either refuses epochs with
// steps, epochs <= 0 and a set context < 1. Refusals are
// *SettingError.
func NewPlan(req Request) (Plan, error) {
	var p Plan
	var err error
	if req.Resume != "" {
		p, err = planResume(req)
	} else {
		p, err = planFresh(req)
	}
	if err != nil {
		return Plan{}, err
	}
	if req.EpochsSet && req.StepsSet {
		return Plan{}, &SettingError{Setting: "epochs", Value: fmt.Sprint(req.Epochs), With: "steps",
			Reason: reason("give one of them; epochs derive the steps from the training sequences")}
	}
	if req.EpochsSet && !(req.Epochs > 0) {
		return Plan{}, settingErr("epochs", fmt.Sprint(req.Epochs), "want a number of passes > 0")
	}
	if req.EpochsSet {
		p.Epochs = req.Epochs
	}
	if slices.Contains(req.Set, "context") && req.Settings.Context < 1 {
		return Plan{}, settingErr("context", fmt.Sprint(req.Settings.Context), "want a number of tokens >= 1, at most the base model's context")
	}
	return p, nil
}

// readState resolves path, a run folder or checkpoint directory named
// by setting, and reads its state.
func readState(setting, path string) (string, train.RunState, error) {
	dir, err := checkpoint.Resolve(path)
	if err != nil {
		return "", train.RunState{}, settingErr(setting, path, "%v", err)
	}
	st, err := train.ReadRunState(filepath.Join(dir, checkpoint.StateFile))
	if err != nil {
		return "", train.RunState{}, settingErr(setting, path, "%v", err)
	}
	return dir, st, nil
}

// planResume is NewPlan's resume.
func planResume(req Request) (Plan, error) {
	dir, st, err := readState("resume", req.Resume)
	if err != nil {
		return Plan{}, err
	}
	saved, err := ReadConfig(dir)
	if err != nil {
		return Plan{}, settingErr("resume", req.Resume, "%v", err)
	}
	if req.EpochsSet {
		return Plan{}, &SettingError{Setting: "epochs", Value: fmt.Sprint(req.Epochs), With: "resume",
			Reason: reason("a resumed fine-tune keeps its steps; pass %s N to run to step N", settingKey("steps"))}
	}
	if len(req.Set) > 0 {
		given := req.Settings
		given.Base, given.Train, given.Valid = resolvedCheckpoint(req.From), absPath(given.Train), absPath(given.Valid)
		key, has, want, err := saved.ResumeConflict(given, req.Set, st.Config.Model.Context)
		if err != nil {
			return Plan{}, err
		}
		if key != "" {
			return Plan{}, &SettingError{Setting: key, Value: want, With: "resume",
				Reason: reason("%s fine-tunes with %s %s; a resumed fine-tune keeps its settings (finetune.json): leave it out", dir, settingKey(key), has)}
		}
	}
	if req.Optimizer != "" && req.Optimizer != st.Config.Optimizer {
		return Plan{}, settingErr("optimizer", req.Optimizer, "%s holds %s optimizer state; a resumed fine-tune keeps its optimizer",
			dir, st.Config.Optimizer)
	}
	return Plan{FineTune: saved, Run: st.Config, Checkpoint: dir, Step: st.Step}, nil
}

// planFresh is NewPlan's fresh fine-tune.
func planFresh(req Request) (Plan, error) {
	if req.From == "" {
		return Plan{}, &SettingError{Setting: "base", Missing: true, Reason: reason("the checkpoint to fine-tune")}
	}
	if req.Settings.Train == "" {
		return Plan{}, &SettingError{Setting: "train", Missing: true, Reason: reason("the training records")}
	}
	dir, st, err := readState("base", req.From)
	if err != nil {
		return Plan{}, err
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return Plan{}, settingErr("base", req.From, "%v", err)
	}
	s := req.Settings
	if s.Method == MethodFull || s.Quantize != 0 {
		quant, err := CheckpointQuantization(dir)
		if err != nil {
			return Plan{}, settingErr("base", req.From, "%v", err)
		}
		if quant != "" && s.Method == MethodFull {
			return Plan{}, settingErr("method", s.Method, "the base %s holds a quantized model (%s); a full fine-tune trains every weight and cannot train quantized ones: use %s lora or dora over it, or import float weights", req.From, quant, settingKey("method"))
		}
		if quant != "" {
			return Plan{}, settingErr("quantize", fmt.Sprint(s.Quantize), "the base %s is quantized already (%s); leave %s out to train the adapters over it as it is", req.From, quant, settingKey("quantize"))
		}
	}
	ft := s
	ft.Base = dir
	if ft.Objective == SFT {
		ft.Objective = ""
	}
	if ft.Objective != GRPOName {
		for _, k := range req.Set {
			if grpoOnly(k) {
				return Plan{}, &SettingError{Setting: k, Value: settingValue(s, k), With: "objective " + string(s.Objective),
					Reason: reason("it sets the grpo objective; add %s grpo or leave it out", settingKey("objective"))}
			}
		}
	}
	if ft.Method == MethodFull {
		ft.Rank, ft.Alpha, ft.Targets = 0, 0, nil
	}
	if ft.Train, err = absFile("train", s.Train); err != nil {
		return Plan{}, err
	}
	if s.Valid != "" {
		if ft.Valid, err = absFile("valid", s.Valid); err != nil {
			return Plan{}, err
		}
	}
	if err := ft.Validate(); err != nil {
		return Plan{}, fmt.Errorf("invalid fine-tune settings: %w", err)
	}
	if ft.Context > st.Config.Model.Context {
		return Plan{}, settingErr("context", fmt.Sprint(ft.Context), "want at most the base model's context, %d", st.Config.Model.Context)
	}
	return Plan{FineTune: ft, Run: Defaults(st.Config, ft.Method)}, nil
}

// CheckRun checks the run's settings c, the plan's Run with the user's
// overrides applied: a resume must have steps left to run.
func (p Plan) CheckRun(c train.Config) error {
	if p.Checkpoint != "" && c.Steps <= p.Step {
		return settingErr("steps", fmt.Sprint(c.Steps), "nothing to do: %s is at step %d and the run has %d steps; pass %s N with N > %d to continue",
			p.Checkpoint, p.Step, c.Steps, settingKey("steps"), p.Step)
	}
	return nil
}

// settingValue is the value of c's setting key as a command line writes
// it, "" for an unknown key.
func settingValue(c Config, key string) string {
	if s, ok := LookupSetting(key); ok && s.saved {
		return s.value(c, 0)
	}
	return ""
}

// absFile checks that path, the setting's, names an existing file and
// makes it absolute, so checkpoints name it from any working directory.
func absFile(setting, path string) (string, error) {
	info, err := os.Stat(path)
	if err != nil {
		if u := errors.Unwrap(err); u != nil {
			err = u
		}
		return "", settingErr(setting, path, "%v", err)
	}
	if info.IsDir() {
		return "", settingErr(setting, path, "a directory; want a jsonl file")
	}
	return filepath.Abs(path)
}

// resolvedCheckpoint is the absolute checkpoint directory path names, as
// finetune.json records a base, or path itself when it names none.
func resolvedCheckpoint(path string) string {
	dir, err := checkpoint.Resolve(path)
	if err != nil {
		return path
	}
	return absPath(dir)
}

// absPath is path made absolute, or path itself when that fails or path
// is "".
func absPath(path string) string {
	if path == "" {
		return ""
	}
	if abs, err := filepath.Abs(path); err == nil {
		return abs
	}
	return path
}

// CheckpointQuantization is the quantization of the model the checkpoint
// directory dir holds (peft.Quantized's String, say "4-bit, groups of
// 64"), or "" for a float model.
func CheckpointQuantization(dir string) (string, error) {
	var out string
	err := mlx.Do(func() error {
		st, err := train.ReadRunState(filepath.Join(dir, checkpoint.StateFile))
		if err != nil {
			return fmt.Errorf("checkpoint %s: %w", dir, err)
		}
		m, err := model.New(st.Config.Model)
		if err != nil {
			return err
		}
		file := filepath.Join(dir, checkpoint.ModelFile)
		arrays, _, err := mlx.LoadSafetensors(file)
		if err != nil {
			return fmt.Errorf("checkpoint %s: %w", dir, err)
		}
		defer func() {
			for _, a := range arrays {
				mlx.Free(a)
			}
		}()
		q, _, err := peft.QuantizedFromNamed(file, m.Specs, arrays)
		if err != nil || q == nil {
			return err
		}
		out = q.String()
		return nil
	})
	return out, err
}
