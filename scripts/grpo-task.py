#!/usr/bin/env python3
"""Writes the two-digit addition task GRPO comparisons train on, the same
for every seed value on every machine (Python's own random.Random, no
third-party package).

    scripts/grpo-task.py OUTDIR [--seed 0] [--train 256] [--heldout 64] [--style tags] [--operands 10-99]

writes

    OUTDIR/train.jsonl     {"prompt": "What is 47 + 18? ...", "answer": "65"}
    OUTDIR/heldout.jsonl   the same fields, pairs not in train.jsonl
    OUTDIR/mlxlmlora/train.jsonl, valid.jsonl
                           the same records with a "system" field, the
                           format of mlx-lm-lora's GRPODataset (prompt,
                           answer, system keys)

The addends are 10-99 (--operands), every (a, b) pair at most once across
both files.
posttrainllm renders a "prompt" as one user message through the model's
chat template; SmolLM2's template then adds its own system message. Without
a "system" field mlx-lm-lora inserts a <think>-style system prompt of its
own instead, so its records carry SmolLM2's default system text (--system),
which renders to the same token ids as posttrainllm's prompts.
"""
import argparse
import json
import os
import random

# The prompt of each --style, and the patterns posttrainllm's "exact" and
# "format" rewards read its answers with (finetune --answer-pattern,
# --format-pattern; the tags style is their default).
STYLES = {
    "tags": ("What is {a} + {b}? Give only the final answer between answer tags, "
             "in the form <answer>N</answer>. For example, for 3 + 4 reply <answer>7</answer>.",
             None, None),
    "equation": ("What is {a} + {b}? Reply with one equation of the form {a} + {b} = N.",
                 r"=\s*(-?\d+)\s*\.?\s*$", r"^\s*\d+\s*\+\s*\d+\s*=\s*-?\d+\s*\.?\s*$"),
    "answer-line": ("What is {a} + {b}? End your reply with a line of the form 'Answer: N'.",
                    r"Answer:\s*(-?\d+)", r"Answer:\s*-?\d+\s*$"),
}
SMOLLM2_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


def records(seed, n, style, lo=10, hi=99):
    """n distinct additions of operands lo-hi, in the order seed draws them."""
    rng = random.Random(seed)
    pairs = rng.sample([(a, b) for a in range(lo, hi + 1) for b in range(lo, hi + 1)], n)
    prompt = STYLES[style][0]
    return [{"prompt": prompt.format(a=a, b=b), "answer": str(a + b)} for a, b in pairs]


def write(path, recs, extra=None):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        for r in recs:
            f.write(json.dumps({**r, **(extra or {})}) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outdir")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--train", type=int, default=256, help="training prompts")
    ap.add_argument("--heldout", type=int, default=64, help="held-out prompts")
    ap.add_argument("--system", default=SMOLLM2_SYSTEM,
                    help="system message of the mlx-lm-lora records (default: SmolLM2's template default)")
    ap.add_argument("--style", choices=sorted(STYLES), default="tags",
                    help="how the prompt asks for the answer (default tags: <answer>N</answer>)")
    ap.add_argument("--operands", default="10-99", metavar="LO-HI",
                    help="range of both addends (default 10-99: two-digit additions)")
    ap.add_argument("--patterns", action="store_true",
                    help="print the style's answer and format patterns, one per line, and write nothing")
    a = ap.parse_args()
    if a.patterns:
        for p in STYLES[a.style][1:]:
            print(p or "")
        return
    try:
        lo, hi = (int(x) for x in a.operands.split("-"))
    except ValueError:
        ap.error(f"--operands {a.operands!r}: want LO-HI, two non-negative integers")
    pairs = (hi - lo + 1) ** 2 if 0 <= lo <= hi else 0
    if a.train < 1 or a.heldout < 1 or a.train + a.heldout > pairs:
        ap.error(f"--train {a.train} and --heldout {a.heldout} with --operands {a.operands}: "
                 f"want each at least 1 and together at most {pairs} (the distinct pairs)")
    recs = records(a.seed, a.train + a.heldout, a.style, lo, hi)
    train, heldout = recs[:a.train], recs[a.train:]
    write(os.path.join(a.outdir, "train.jsonl"), train)
    write(os.path.join(a.outdir, "heldout.jsonl"), heldout)
    sys_field = {"system": a.system}
    write(os.path.join(a.outdir, "mlxlmlora", "train.jsonl"), train, sys_field)
    write(os.path.join(a.outdir, "mlxlmlora", "valid.jsonl"), heldout, sys_field)
    print(f"grpo-task: {len(train)} training and {len(heldout)} held-out prompts (seed {a.seed}) in {a.outdir}")


if __name__ == "__main__":
    main()
