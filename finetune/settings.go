package finetune

import (
	"fmt"
	"strings"
)

// Setting is one setting of a fine-tune Request, declared once so that
// every command line asking for fine-tunes registers the same flag, with
// the same default and usage, and the plan's refusals (SettingError) can
// be worded with the flag's name. Settings lists them all.
type Setting struct {
	// Key names the setting in SettingError and Request.Set: the
	// finetune.json key of a saved setting (base, train, rank ...), else
	// resume or epochs.
	Key string
	// Flag is the command-line flag that sets it, without dashes.
	Flag string
	// Usage is the flag's help text.
	Usage string
	// Default is the value the setting has when the user does not give
	// it: an int, float64, string, bool or []string, the type Field
	// points to.
	Default any
	// Field is the address of the setting's field in r: an *int,
	// *float64, *string, *bool or *[]string.
	Field func(r *Request) any
	// saved marks a setting finetune.json holds, which a resume keeps;
	// grpo one of GRPO's own, refused for any other objective.
	saved, grpo bool
	// written is the saved setting's value in a Config as a command line
	// writes it, given the base model's context; nil writes the field's
	// value as it is.
	written func(c Config, baseContext int) string
}

// settingKind is what a Setting is for: the request only, or saved in
// finetune.json (as every setting or only GRPO's).
type settingKind int

const (
	requestOnly settingKind = iota // resume, epochs
	savedSetting
	grpoSetting
)

// setting is a Setting of kind whose field, of type T, field finds in a
// Request; its default is def. T ties Default to Field.
func setting[T int | float64 | string | bool | []string](kind settingKind, key, flag string, def T, usage string, field func(*Request) *T) Setting {
	return Setting{Key: key, Flag: flag, Default: def, Usage: usage, Field: func(r *Request) any { return field(r) },
		saved: kind != requestOnly, grpo: kind == grpoSetting}
}

// writtenAs is s with its value in a Config written by w.
func (s Setting) writtenAs(w func(c Config, baseContext int) string) Setting {
	s.written = w
	return s
}

// Settings lists a fine-tune request's settings: the base and the
// resumed run, the data, the adapters, the objective and its
// hyperparameters, and epochs. The run's own settings (steps, batch,
// optimizer ...) are train.Config's. The saved ones come in the order a
// resume compares them (Config.ResumeConflict).
func Settings() []Setting {
	const (
		r = requestOnly
		s = savedSetting
		g = grpoSetting
	)
	return []Setting{
		setting(s, "base", "from", "", "base checkpoint: a run folder (its newest checkpoint) or a checkpoint directory", func(q *Request) *string { return &q.From }),
		setting(s, "train", "data", "", "training records, a jsonl file", func(q *Request) *string { return &q.Settings.Train }),
		setting(s, "valid", "valid", "", "held-out records, a jsonl file (optional)", func(q *Request) *string { return &q.Settings.Valid }),
		setting(s, "method", "method", MethodLoRA, "lora, dora or full", func(q *Request) *string { return &q.Settings.Method }),
		setting(s, "rank", "rank", 8, "adapter rank r", func(q *Request) *int { return &q.Settings.Rank }),
		setting(s, "alpha", "alpha", 16.0, "adapter scale numerator: the update is alpha/r · B·A", func(q *Request) *float64 { return &q.Settings.Alpha }),
		setting(s, "targets", "targets", []string{"attn"}, "projections to adapt: attn, mlp, all, or names such as wq,wv", func(q *Request) *[]string { return &q.Settings.Targets }),
		setting(s, "mask_prompt", "mask-prompt", true, "count only completions and assistant turns in the loss", func(q *Request) *bool { return &q.Settings.MaskPrompt }),
		setting(s, "pack", "pack", false, "pack examples into the context instead of padding each (each attends only within itself)", func(q *Request) *bool { return &q.Settings.Pack }),
		setting(s, "context", "context", 0, "tokens per training sequence (default and at most the base model's context)", func(q *Request) *int { return &q.Settings.Context }).
			writtenAs(func(c Config, base int) string {
				if c.Context == 0 {
					return fmt.Sprint(base)
				}
				return fmt.Sprint(c.Context)
			}),
		setting(s, "quantize", "quantize", 0, "hold the frozen base's projections quantized to 4 or 8 bits (2, 3, 5, 6 too) and train the adapters over them (QLoRA); 0 keeps them float", func(q *Request) *int { return &q.Settings.Quantize }),
		setting(s, "q_group_size", "q-group-size", 0, "values per quantization scale with --quantize: 32, 64 or 128 (default 64)", func(q *Request) *int { return &q.Settings.QGroupSize }).
			writtenAs(func(c Config, _ int) string { return fmt.Sprint(c.QuantGroupSize()) }),
		setting(s, "objective", "objective", string(SFT), "what to optimise, one of the built-in objectives: "+objectiveList()+" (dpo, ipo, orpo, simpo: preference pairs; grpo: prompts and rewards)",
			func(q *Request) *string { return (*string)(&q.Settings.Objective) }).
			writtenAs(func(c Config, _ int) string {
				if c.Objective == "" {
					return string(SFT)
				}
				return string(c.Objective)
			}),
		setting(s, "beta", "beta", 0.0, "β of dpo, ipo and simpo (0: 0.1 for dpo and ipo, 2 for simpo); grpo's KL weight (0: no KL)", func(q *Request) *float64 { return &q.Settings.Beta }),
		setting(s, "orpo_lambda", "orpo-lambda", 0.0, "weight λ of orpo's odds-ratio term (0: 0.1)", func(q *Request) *float64 { return &q.Settings.Lambda }),
		setting(s, "simpo_gamma", "simpo-gamma", 0.0, "target margin γ of simpo (0: 1)", func(q *Request) *float64 { return &q.Settings.Gamma }),

		setting(g, "group_size", "group-size", 0, "grpo: completions per prompt (0: 8)", func(q *Request) *int { return &q.Settings.GroupSize }),
		setting(g, "max_completion", "max-completion", 0, "grpo: most tokens of a completion (0: 256)", func(q *Request) *int { return &q.Settings.MaxCompletion }),
		setting(g, "temperature", "temperature", 0.0, "grpo: sampling temperature (0: 1)", func(q *Request) *float64 { return &q.Settings.Temperature }),
		setting(g, "top_p", "top-p", 0.0, "grpo: nucleus sampling's probability mass (0: 1, off)", func(q *Request) *float64 { return &q.Settings.TopP }),
		setting(g, "top_k", "top-k", 0, "grpo: sample among the k most likely tokens (0: off)", func(q *Request) *int { return &q.Settings.TopK }),
		setting(g, "reward", "reward", "", "grpo: built-in rewards, name[:weight],… of exact, format, length (default exact unless --reward-cmd)", func(q *Request) *string { return &q.Settings.Reward }),
		setting(g, "reward_cmd", "reward-cmd", "", "grpo: a reward program, run by sh -c: JSON lines in, one number per line out (weight 1)", func(q *Request) *string { return &q.Settings.RewardCmd }),
		setting(g, "reward_timeout_s", "reward-timeout", 0.0, "grpo: seconds one run of --reward-cmd may take (0: 60)", func(q *Request) *float64 { return &q.Settings.RewardTimeout }),
		setting(g, "answer_field", "answer-field", "", "grpo: the prompt record's field the exact reward compares with (default answer)", func(q *Request) *string { return &q.Settings.AnswerField }),
		setting(g, "answer_pattern", "answer-pattern", "", "grpo: regular expression whose first group is a completion's answer (default <answer>(.*?)</answer>)", func(q *Request) *string { return &q.Settings.AnswerPattern }),
		setting(g, "format_pattern", "format-pattern", "", "grpo: regular expression a well-formatted completion matches (default: an <answer> block after an optional <think> block)", func(q *Request) *string { return &q.Settings.FormatPattern }),
		setting(g, "loss_type", "loss-type", "", "grpo: token normalisation, dapo, grpo, bnpo or dr_grpo (default dapo)", func(q *Request) *string { return &q.Settings.LossType }),
		setting(g, "epsilon", "epsilon", 0.0, "grpo: the ratio's lower clip, 1 − epsilon (0: 0.2)", func(q *Request) *float64 { return &q.Settings.Epsilon }),
		setting(g, "epsilon_high", "epsilon-high", 0.0, "grpo: the ratio's upper clip, 1 + epsilon-high (0: --epsilon)", func(q *Request) *float64 { return &q.Settings.EpsilonHigh }),
		setting(g, "iterations", "iterations", 0, "grpo: updates per batch of completions (0: 1)", func(q *Request) *int { return &q.Settings.Iterations }),
		setting(g, "scale_rewards", "scale-rewards", "", "grpo: divide advantages by the group's (group), the batch's (batch) or no (none) standard deviation (default group)", func(q *Request) *string { return &q.Settings.ScaleRewards }),
		setting(g, "mask_truncated", "mask-truncated", false, "grpo: leave completions that used the whole budget out of the loss", func(q *Request) *bool { return &q.Settings.MaskTruncated }),

		setting(r, "resume", "resume", "", "continue the fine-tune of this run folder or checkpoint directory", func(q *Request) *string { return &q.Resume }),
		setting(r, "epochs", "epochs", 0.0, "passes over the training sequences, instead of --steps (steps = ceil(epochs × sequences / (batch × accum)))", func(q *Request) *float64 { return &q.Epochs }),
	}
}

// LookupSetting returns the setting of Settings whose key is key.
func LookupSetting(key string) (Setting, bool) {
	for _, s := range Settings() {
		if s.Key == key {
			return s, true
		}
	}
	return Setting{}, false
}

// savedSettings are the settings finetune.json holds, in Settings' order.
func savedSettings() []Setting {
	var out []Setting
	for _, s := range Settings() {
		if s.saved {
			out = append(out, s)
		}
	}
	return out
}

// value is the saved setting's value in c as a command line writes it;
// a context of 0 is the base's, baseContext.
func (s Setting) value(c Config, baseContext int) string {
	if s.written != nil {
		return s.written(c, baseContext)
	}
	switch p := s.Field(&Request{From: c.Base, Settings: c}).(type) {
	case *string:
		return *p
	case *[]string:
		return strings.Join(*p, ",")
	case *int:
		return fmt.Sprint(*p)
	case *float64:
		return fmt.Sprint(*p)
	case *bool:
		return fmt.Sprint(*p)
	}
	return ""
}

// grpoOnly reports whether key names one of GRPO's own settings.
func grpoOnly(key string) bool {
	s, ok := LookupSetting(key)
	return ok && s.grpo
}

// Given records that the user set the setting key explicitly: a key of
// a saved setting joins Set, epochs sets EpochsSet and steps StepsSet;
// resume and any other key change nothing.
func (r *Request) Given(key string) {
	switch key {
	case "epochs":
		r.EpochsSet = true
	case "steps":
		r.StepsSet = true
	default:
		if s, ok := LookupSetting(key); ok && s.saved {
			r.Set = append(r.Set, key)
		}
	}
}
