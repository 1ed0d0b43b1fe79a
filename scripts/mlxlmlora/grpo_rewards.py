"""posttrainllm's built-in GRPO rewards "exact" and "format" (rl/builtin.go)
as mlx-lm-lora reward functions, so that both tools score completions alike:

    mlx_lm_lora.train ... --reward-functions-file scripts/mlxlmlora/grpo_rewards.py \
        --reward-functions exact,format --reward-weights "[1,0.2]"

exact   1 when the first <answer>…</answer> of the completion holds the
        record's answer (both trimmed; compared as numbers when both are
        finite numbers), else 0
format  1 when the whole completion is an <answer>…</answer> block,
        optionally after a <think>…</think> one, else 0
"""
import math
import re

from mlx_lm_lora.trainer.grpo_reward_functions import register_reward_function

ANSWER = re.compile(r"<answer>\s*(.*?)\s*</answer>", re.S)
FORMAT = re.compile(r"^\s*(?:<think>.*?</think>\s*)?<answer>.*?</answer>\s*$", re.S)


def _same(got, want):
    got, want = got.strip(), str(want).strip()
    if got == want:
        return True
    try:
        x, y = float(got), float(want)
    except ValueError:
        return False
    return math.isfinite(x) and x == y


@register_reward_function("exact")
def exact(prompts, completions, answer, types=None):
    out = []
    for text, want in zip(completions, answer):
        m = ANSWER.search(text)
        out.append(1.0 if m and _same(m.group(1), want) else 0.0)
    return out


@register_reward_function("format")
def format(prompts, completions, answer, types=None):  # noqa: A001 (the reward's name)
    return [1.0 if FORMAT.match(text) else 0.0 for text in completions]
