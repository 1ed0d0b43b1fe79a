// Package rl is online reinforcement learning with rewards: prompts,
// reward functions, group advantages, rollouts and the GRPO loss.
//
// A training prompt (Prompt, read from jsonl by ReadPrompts) is sampled
// several times; each completion is scored by one or more rewards (a
// Scorer: the built-ins Exact, Format and Length, a Go function through
// FromFunc, or an external program through Program), their weighted sum
// (Score) is the completion's reward, and GroupAdvantages turns the
// rewards of each prompt's group into the advantages the loss weighs
// the completion's tokens by, as in GRPO (Shao et al., 2024) and its
// Dr. GRPO and DAPO variants.
//
// The reward and advantage parts are plain Go on the host: they never
// touch the MLX thread.
package rl
