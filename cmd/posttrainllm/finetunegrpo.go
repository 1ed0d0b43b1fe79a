package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/finetune"
)

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
