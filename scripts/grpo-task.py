#!/usr/bin/env python3
"""Writes the two-digit addition task GRPO comparisons train on, the same
for every seed value on every machine (Python's own random.Random, no
third-party package).

    scripts/grpo-task.py OUTDIR [--seed 0] [--train 256] [--heldout 64]

writes

    OUTDIR/train.jsonl     {"prompt": "What is 47 + 18? ...", "answer": "65"}
    OUTDIR/heldout.jsonl   the same fields, pairs not in train.jsonl
    OUTDIR/mlxlmlora/train.jsonl, valid.jsonl
                           the same records with a "system" field, the
                           format of mlx-lm-lora's GRPODataset (prompt,
                           answer, system keys)

The addends are 10-99, every (a, b) pair at most once across both files.
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

PROMPT = ("What is {a} + {b}? Give only the final answer between answer tags, "
          "in the form <answer>N</answer>. For example, for 3 + 4 reply <answer>7</answer>.")
SMOLLM2_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


def records(seed, n):
    """n distinct two-digit additions, in the order seed draws them."""
    rng = random.Random(seed)
    pairs = rng.sample([(a, b) for a in range(10, 100) for b in range(10, 100)], n)
    return [{"prompt": PROMPT.format(a=a, b=b), "answer": str(a + b)} for a, b in pairs]


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
    a = ap.parse_args()
    if a.train < 1 or a.heldout < 1 or a.train + a.heldout > 90 * 90:
        ap.error(f"--train {a.train} and --heldout {a.heldout}: want each at least 1 and together at most 8100 (the two-digit pairs)")
    recs = records(a.seed, a.train + a.heldout)
    train, heldout = recs[:a.train], recs[a.train:]
    write(os.path.join(a.outdir, "train.jsonl"), train)
    write(os.path.join(a.outdir, "heldout.jsonl"), heldout)
    sys_field = {"system": a.system}
    write(os.path.join(a.outdir, "mlxlmlora", "train.jsonl"), train, sys_field)
    write(os.path.join(a.outdir, "mlxlmlora", "valid.jsonl"), heldout, sys_field)
    print(f"grpo-task: {len(train)} training and {len(heldout)} held-out prompts (seed {a.seed}) in {a.outdir}")


if __name__ == "__main__":
    main()
