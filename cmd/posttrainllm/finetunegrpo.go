package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/pflag"

	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/finetune"
)

// grpoOptions are finetune's flags of the grpo objective.
type grpoOptions struct {
	groupSize, maxCompletion, topK, iterations int
	temperature, topP, epsilon, epsilonHigh    float64
	rewardTimeout                              float64
	reward, rewardCmd, answerField             string
	answerPattern, formatPattern               string
	lossType, scaleRewards                     string
	maskTruncated                              bool
}

// grpoOwnFlags are the grpo flags that define a fine-tune, with their
// finetune.json keys (finetuneOwnFlags).
var grpoOwnFlags = []struct{ flag, key string }{
	{"group-size", "group_size"}, {"max-completion", "max_completion"}, {"temperature", "temperature"},
	{"top-p", "top_p"}, {"top-k", "top_k"}, {"reward", "reward"}, {"reward-cmd", "reward_cmd"},
	{"reward-timeout", "reward_timeout_s"}, {"answer-field", "answer_field"}, {"answer-pattern", "answer_pattern"},
	{"format-pattern", "format_pattern"}, {"loss-type", "loss_type"}, {"epsilon", "epsilon"},
	{"epsilon-high", "epsilon_high"}, {"iterations", "iterations"}, {"scale-rewards", "scale_rewards"},
	{"mask-truncated", "mask_truncated"},
}

// grpoHelp is finetune's help on the grpo objective.
const grpoHelp = `--objective grpo trains with rewards (GRPO, online): --data and --valid
then hold prompts, {"prompt": …} or {"messages": […]}, with any other
fields the rewards read (e.g. "answer"). Each update draws --group-size
completions (8) of batch × accum / group-size prompts from the model
being trained (the batched generation engine, on the step's own
weights), at most --max-completion tokens each (256), at --temperature
(1), --top-p and --top-k; scores them with --reward, a weighted sum of
built-in rewards "name[:weight],…" (exact: the <answer>…</answer> equals
the record's --answer-field, or --answer-pattern's first group; format:
the completion matches --format-pattern; length: minus the share of the
budget used), plus --reward-cmd, a program that reads one JSON object
per completion on stdin and writes one number per line (each run
bounded by --reward-timeout seconds); and trains on each completion's
tokens weighted by its advantage over its group (--scale-rewards group,
batch or none), the ratio clipped to [1 − --epsilon, 1 + --epsilon-high]
and the tokens averaged per --loss-type (dapo, grpo, bnpo, dr_grpo).
--beta adds the KL to the base model (k3 estimate; 0, the default, has
no reference pass), --iterations reuses each batch of completions for
that many updates, --mask-truncated leaves completions that hit the
budget out of the loss. A failing reward program stops the run after a
checkpoint. Metrics add the rewards (each one), their spread, the
completions' length and share truncated, the clipped share, the KL, and
rollout, scoring and update seconds; --valid is answered greedily and
its mean rewards logged (val_aux), the held-out loss being the negated
mean reward (docs/grpo.md).`

// addGRPOFlags registers the grpo objective's flags on fs.
func addGRPOFlags(fs *pflag.FlagSet, o *grpoOptions) {
	fs.IntVar(&o.groupSize, "group-size", 0, "grpo: completions per prompt (0: 8)")
	fs.IntVar(&o.maxCompletion, "max-completion", 0, "grpo: most tokens of a completion (0: 256)")
	fs.Float64Var(&o.temperature, "temperature", 0, "grpo: sampling temperature (0: 1)")
	fs.Float64Var(&o.topP, "top-p", 0, "grpo: nucleus sampling's probability mass (0: 1, off)")
	fs.IntVar(&o.topK, "top-k", 0, "grpo: sample among the k most likely tokens (0: off)")
	fs.StringVar(&o.reward, "reward", "", "grpo: built-in rewards, name[:weight],… of exact, format, length (default exact unless --reward-cmd)")
	fs.StringVar(&o.rewardCmd, "reward-cmd", "", "grpo: a reward program, run by sh -c: JSON lines in, one number per line out (weight 1)")
	fs.Float64Var(&o.rewardTimeout, "reward-timeout", 0, "grpo: seconds one run of --reward-cmd may take (0: 60)")
	fs.StringVar(&o.answerField, "answer-field", "", "grpo: the prompt record's field the exact reward compares with (default answer)")
	fs.StringVar(&o.answerPattern, "answer-pattern", "", "grpo: regular expression whose first group is a completion's answer (default <answer>(.*?)</answer>)")
	fs.StringVar(&o.formatPattern, "format-pattern", "", "grpo: regular expression a well-formatted completion matches (default: an <answer> block after an optional <think> block)")
	fs.StringVar(&o.lossType, "loss-type", "", "grpo: token normalisation, dapo, grpo, bnpo or dr_grpo (default dapo)")
	fs.Float64Var(&o.epsilon, "epsilon", 0, "grpo: the ratio's lower clip, 1 − epsilon (0: 0.2)")
	fs.Float64Var(&o.epsilonHigh, "epsilon-high", 0, "grpo: the ratio's upper clip, 1 + epsilon-high (0: --epsilon)")
	fs.IntVar(&o.iterations, "iterations", 0, "grpo: updates per batch of completions (0: 1)")
	fs.StringVar(&o.scaleRewards, "scale-rewards", "", "grpo: divide advantages by the group's (group), the batch's (batch) or no (none) standard deviation (default group)")
	fs.BoolVar(&o.maskTruncated, "mask-truncated", false, "grpo: leave completions that used the whole budget out of the loss")
}

// set copies the grpo flags into ft.
func (o grpoOptions) set(ft *finetune.Config) {
	ft.GroupSize, ft.MaxCompletion, ft.Temperature, ft.TopP, ft.TopK = o.groupSize, o.maxCompletion, o.temperature, o.topP, o.topK
	ft.Reward, ft.RewardCmd, ft.RewardTimeout = o.reward, o.rewardCmd, o.rewardTimeout
	ft.AnswerField, ft.AnswerPattern, ft.FormatPattern = o.answerField, o.answerPattern, o.formatPattern
	ft.LossType, ft.Epsilon, ft.EpsilonHigh, ft.Iterations = o.lossType, o.epsilon, o.epsilonHigh, o.iterations
	ft.ScaleRewards, ft.MaskTruncated = o.scaleRewards, o.maskTruncated
}

// describeGRPO is the header line of a GRPO fine-tune.
func describeGRPO(ft finetune.Config) string {
	g, err := finetune.GRPOFrom(ft)
	if err != nil {
		return "objective: grpo (" + err.Error() + ")"
	}
	r := g.Rollout
	rewards := g.Reward
	if g.RewardCmd != "" {
		rewards = strings.TrimPrefix(rewards+",cmd", ",")
	}
	line := fmt.Sprintf("objective: grpo, %d completions per prompt of at most %d tokens (temperature %g, top-p %g, top-k %d), rewards %s, loss %s, clip [%g, %g], advantages scaled by %s",
		r.GroupSize, r.MaxCompletion, r.Temperature, r.TopP, r.TopK, rewards, g.LossType, 1-g.Clip.Low, 1+g.Clip.High, g.Scale)
	if g.Beta > 0 {
		line += fmt.Sprintf(", beta %g to the base", g.Beta)
	}
	if g.Iterations > 1 {
		line += fmt.Sprintf(", %d updates per batch", g.Iterations)
	}
	return line
}

// printPrompts describes a GRPO fine-tune's prompt rows.
func printPrompts(w io.Writer, what, path string, r *data.Rows, maxCompletion int) {
	fmt.Fprintf(w, "%s: %s: %d prompts, rows of %d tokens (the longest prompt and %d completion tokens)\n", what, path, r.Len(), r.T, maxCompletion)
}
