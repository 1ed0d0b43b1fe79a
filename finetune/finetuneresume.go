package finetune

import (
	"fmt"
	"slices"
	"strings"
)

// fineTuneSettings are the settings that define a fine-tune, by their
// finetune.json keys, as a resume compares them: their values written as
// the command line writes them.
var fineTuneSettings = []struct {
	key   string
	value func(c Config, baseContext int) string
}{
	{"base", func(c Config, _ int) string { return c.Base }},
	{"train", func(c Config, _ int) string { return c.Train }},
	{"valid", func(c Config, _ int) string { return c.Valid }},
	{"method", func(c Config, _ int) string { return c.Method }},
	{"rank", func(c Config, _ int) string { return fmt.Sprint(c.Rank) }},
	{"alpha", func(c Config, _ int) string { return fmt.Sprint(c.Alpha) }},
	{"targets", func(c Config, _ int) string { return strings.Join(c.Targets, ",") }},
	{"mask_prompt", func(c Config, _ int) string { return fmt.Sprint(c.MaskPrompt) }},
	{"pack", func(c Config, _ int) string { return fmt.Sprint(c.Pack) }},
	{"context", func(c Config, base int) string {
		if c.Context == 0 {
			return fmt.Sprint(base)
		}
		return fmt.Sprint(c.Context)
	}},
	{"quantize", func(c Config, _ int) string { return fmt.Sprint(c.Quantize) }},
	{"q_group_size", func(c Config, _ int) string { return fmt.Sprint(c.QuantGroupSize()) }},
	{"objective", func(c Config, _ int) string {
		if c.Objective == "" {
			return string(SFT)
		}
		return string(c.Objective)
	}},
	{"beta", func(c Config, _ int) string { return fmt.Sprint(c.Beta) }},
	{"orpo_lambda", func(c Config, _ int) string { return fmt.Sprint(c.Lambda) }},
	{"simpo_gamma", func(c Config, _ int) string { return fmt.Sprint(c.Gamma) }},
	{"group_size", func(c Config, _ int) string { return fmt.Sprint(c.GroupSize) }},
	{"max_completion", func(c Config, _ int) string { return fmt.Sprint(c.MaxCompletion) }},
	{"temperature", func(c Config, _ int) string { return fmt.Sprint(c.Temperature) }},
	{"top_p", func(c Config, _ int) string { return fmt.Sprint(c.TopP) }},
	{"top_k", func(c Config, _ int) string { return fmt.Sprint(c.TopK) }},
	{"reward", func(c Config, _ int) string { return c.Reward }},
	{"reward_cmd", func(c Config, _ int) string { return c.RewardCmd }},
	{"reward_timeout_s", func(c Config, _ int) string { return fmt.Sprint(c.RewardTimeout) }},
	{"answer_field", func(c Config, _ int) string { return c.AnswerField }},
	{"answer_pattern", func(c Config, _ int) string { return c.AnswerPattern }},
	{"format_pattern", func(c Config, _ int) string { return c.FormatPattern }},
	{"loss_type", func(c Config, _ int) string { return c.LossType }},
	{"epsilon", func(c Config, _ int) string { return fmt.Sprint(c.Epsilon) }},
	{"epsilon_high", func(c Config, _ int) string { return fmt.Sprint(c.EpsilonHigh) }},
	{"iterations", func(c Config, _ int) string { return fmt.Sprint(c.Iterations) }},
	{"scale_rewards", func(c Config, _ int) string { return c.ScaleRewards }},
	{"mask_truncated", func(c Config, _ int) string { return fmt.Sprint(c.MaskTruncated) }},
}

// adapterShapeKeys are the settings a checkpoint's trainable arrays are
// shaped by: a resume under any other value cannot load them.
var adapterShapeKeys = []string{"method", "rank", "alpha", "targets", "quantize", "q_group_size"}

// ResumeConflict is the one rule for resuming a fine-tune with settings:
// c is what the fine-tune saved (finetune.json), given what a resume
// passes, and keys the settings given sets (finetune.json keys; nil for
// every one). It returns the first of them whose value differs, with the
// saved and the given value as a command line writes them; "" when none
// does. A context of 0 is the base's, baseContext. An unknown key is an
// error.
func (c Config) ResumeConflict(given Config, keys []string, baseContext int) (key, saved, want string, err error) {
	for _, k := range keys {
		if !knownSetting(k) {
			return "", "", "", fmt.Errorf("fine-tune setting %q, want a finetune.json key", k)
		}
	}
	for _, s := range fineTuneSettings {
		if keys != nil && !containsKey(keys, s.key) {
			continue
		}
		if a, b := s.value(c, baseContext), s.value(given, baseContext); a != b {
			return s.key, a, b, nil
		}
	}
	return "", "", "", nil
}

// containsKey reports whether keys holds k.
func containsKey(keys []string, k string) bool { return slices.Contains(keys, k) }

// knownSetting reports whether k is a key of fineTuneSettings.
func knownSetting(k string) bool {
	for _, s := range fineTuneSettings {
		if s.key == k {
			return true
		}
	}
	return false
}
