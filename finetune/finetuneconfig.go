package finetune

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/posttrainllm/posttrainllm/checkpoint"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/peft"
	"github.com/posttrainllm/posttrainllm/train"
)

// Fine-tuning methods.
const (
	MethodLoRA = "lora" // low-rank adapters on the target projections
	MethodDoRA = "dora" // weight-decomposed low-rank adapters
	MethodFull = "full" // every parameter trainable
)

// Methods lists the methods a fine-tune accepts.
func Methods() []string { return []string{MethodLoRA, MethodDoRA, MethodFull} }

// Config is what a fine-tune adds to a run's train.Config, whose model
// and tokenizer come from the base checkpoint. Checkpoints store it as
// finetune.json, so a resumed fine-tune and sampling with its adapters use
// the same settings.
type Config struct {
	// Base is the checkpoint directory fine-tuning starts from.
	Base   string `json:"base"`
	Method string `json:"method"` // lora, dora or full
	// Rank, Alpha and Targets shape the adapters (peft.Config); unused by
	// a full fine-tune.
	Rank    int      `json:"rank,omitempty"`
	Alpha   float64  `json:"alpha,omitempty"`
	Targets []string `json:"targets,omitempty"`
	// Train and Valid are jsonl files of records (data.ReadRecords);
	// Valid may be empty (no held-out loss).
	Train string `json:"train"`
	Valid string `json:"valid,omitempty"`
	// MaskPrompt leaves prompts, user and system turns out of the loss.
	MaskPrompt bool `json:"mask_prompt"`
	// Pack concatenates examples into the context instead of padding each
	// to it (data.BuildRows), each attending only within itself (document
	// masking, PackedInputs); held-out rows stay one example each.
	Pack bool `json:"pack"`
	// Context is the length of the training rows in tokens, at most the
	// base model's context; 0 is the base's.
	Context int `json:"context,omitempty"`
	// Quantize, when not 0, holds the frozen base's block projections,
	// token embedding and untied output head quantized to this many bits (MLX's affine mode, groups of
	// QGroupSize, 0 meaning 64) and trains the adapters over them (QLoRA);
	// adapters only.
	Quantize   int `json:"quantize,omitempty"`
	QGroupSize int `json:"q_group_size,omitempty"`
	// Objective names what the fine-tune minimises (NewObjective): SFT
	// (or empty) the cross-entropy of the counted targets of Train's
	// records, or a preference objective (DPO, IPO, ORPO, SimPO) over
	// Train's preference pairs (data.ReadPreferenceRecords).
	Objective ObjectiveName `json:"objective,omitempty"`
	// Beta, Lambda and Gamma are the preference objective's β (DPO, IPO,
	// SimPO), ORPO's λ and SimPO's γ; 0 takes the objective's default
	// (Preference.WithDefaults).
	Beta   float64 `json:"beta,omitempty"`
	Lambda float64 `json:"orpo_lambda,omitempty"`
	Gamma  float64 `json:"simpo_gamma,omitempty"`
	// The GRPO objective's settings (GRPO): 0 or empty takes the
	// default GRPO.WithDefaults gives. Beta above is its KL weight.
	GroupSize     int     `json:"group_size,omitempty"`
	MaxCompletion int     `json:"max_completion,omitempty"`
	Temperature   float64 `json:"temperature,omitempty"`
	TopP          float64 `json:"top_p,omitempty"`
	TopK          int     `json:"top_k,omitempty"`
	Reward        string  `json:"reward,omitempty"`
	RewardCmd     string  `json:"reward_cmd,omitempty"`
	// RewardTimeout bounds one run of RewardCmd, in seconds.
	RewardTimeout float64 `json:"reward_timeout_s,omitempty"`
	AnswerField   string  `json:"answer_field,omitempty"`
	AnswerPattern string  `json:"answer_pattern,omitempty"`
	FormatPattern string  `json:"format_pattern,omitempty"`
	LossType      string  `json:"loss_type,omitempty"`
	Epsilon       float64 `json:"epsilon,omitempty"`
	EpsilonHigh   float64 `json:"epsilon_high,omitempty"`
	Iterations    int     `json:"iterations,omitempty"`
	ScaleRewards  string  `json:"scale_rewards,omitempty"`
	MaskTruncated bool    `json:"mask_truncated,omitempty"`
	// Tokenizers builds the base's tokenizer when its config names one
	// package data does not know (train.HFTokenizer); nil for data.NewTokenizer.
	Tokenizers train.TokenizerOpener `json:"-"`
}

// Prefers reports whether the fine-tune optimises a preference objective
// (anything but SFT).
func (c Config) Prefers() bool { return c.Objective != "" && c.Objective != SFT }

// Preference returns the fine-tune's preference objective, its unset
// hyperparameters at their defaults.
func (c Config) Preference() Preference {
	return Preference{Objective: c.Objective, Beta: c.Beta, Lambda: c.Lambda, Gamma: c.Gamma}.WithDefaults()
}

// Adapter returns the adapter settings of a LoRA or DoRA fine-tune.
func (c Config) Adapter() peft.Config {
	return peft.Config{Method: peft.Method(c.Method), Rank: c.Rank, Alpha: c.Alpha, Targets: c.Targets}
}

// UsesAdapter reports whether the method trains adapters (not full).
func (c Config) UsesAdapter() bool { return c.Method != MethodFull }

// Validate reports the first setting that cannot run, the objective's
// among them (NewObjective).
func (c Config) Validate() error {
	if err := c.validateRun(); err != nil {
		return err
	}
	_, err := NewObjective(c)
	return err
}

// validateRun is Validate but for the objective: the method, data,
// adapters and quantization, whatever the fine-tune optimises.
func (c Config) validateRun() error {
	if !slices.Contains(Methods(), c.Method) {
		return fmt.Errorf("method %q, want one of %s", c.Method, strings.Join(Methods(), ", "))
	}
	if c.Base == "" {
		return errors.New("no base checkpoint")
	}
	if c.Train == "" {
		return errors.New("no training data")
	}
	if c.Context < 0 {
		return fmt.Errorf("context = %d, want >= 1 (or 0: the base model's)", c.Context)
	}
	if c.UsesAdapter() {
		if err := c.Adapter().Validate(); err != nil {
			return err
		}
	}
	if c.Quantize != 0 || c.QGroupSize != 0 {
		if !c.UsesAdapter() {
			return fmt.Errorf("quantize %d: a full fine-tune trains every weight and cannot train a quantized base; use method lora or dora over it, or leave quantize out", c.Quantize)
		}
		if c.Quantize == 0 {
			return fmt.Errorf("q_group_size %d without quantize: set the bits too", c.QGroupSize)
		}
		if err := mlx.CheckQuantization(c.QuantGroupSize(), c.Quantize); err != nil {
			return fmt.Errorf("quantize %d, q_group_size %d: %w", c.Quantize, c.QuantGroupSize(), err)
		}
	}
	return nil
}

// DefaultQuantGroupSize is the quantization group size when QGroupSize is
// 0, mlx-lm's default.
const DefaultQuantGroupSize = 64

// QuantGroupSize is QGroupSize or its default.
func (c Config) QuantGroupSize() int {
	if c.QGroupSize == 0 {
		return DefaultQuantGroupSize
	}
	return c.QGroupSize
}

// ReadConfig reads a fine-tune checkpoint's finetune.json.
func ReadConfig(dir string) (Config, error) {
	var c Config
	f, err := os.Open(filepath.Join(dir, checkpoint.FineTuneFile))
	if err != nil {
		return c, fmt.Errorf("checkpoint %s is no fine-tune checkpoint: %w", dir, err)
	}
	defer f.Close()
	if err := checkpoint.DecodeJSON(f, &c); err != nil {
		return c, fmt.Errorf("%s: not valid: %w", filepath.Join(dir, checkpoint.FineTuneFile), err)
	}
	// The objective is checked by whoever trains with it again: another
	// one than the built-ins may have written the file.
	if err := c.validateRun(); err != nil {
		return c, fmt.Errorf("%s: %w", filepath.Join(dir, checkpoint.FineTuneFile), err)
	}
	return c, nil
}

// fineTuneFiles are the extra checkpoint files of a fine-tune: its
// settings and, with adapters, the adapter arrays.
func fineTuneFiles(ft Config, adapterNames []string, adapters []*mlx.Array) ([]checkpoint.File, error) {
	js, err := json.MarshalIndent(ft, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	files := []checkpoint.File{checkpoint.Bytes(checkpoint.FineTuneFile, append(js, '\n'))}
	if ft.UsesAdapter() {
		meta := map[string]string{"peft": string(js), "format": "mlx"}
		files = append(files, checkpoint.Arrays(checkpoint.AdapterFile, adapterNames, adapters, meta))
	}
	return files, nil
}
