"""Held-out accuracy of a model on the GRPO addition task (scripts/grpo-task.py),
with mlx-lm: whether learning from the base model is possible at all.

    .deps/mlxlmlora/bin/python scripts/mlxlmlora/greedy_accuracy.py \
        --model .deps/models/SmolLM2-135M-Instruct --data TASK/heldout.jsonl \
        [--adapter ADAPTER_DIR] [--max-tokens 32] [--samples 8] [--temperature 1]

Each prompt is rendered as one user message through the model's chat
template (what posttrainllm's GRPO does), and completions run to the end
token or --max-tokens (no stop at </answer>). It reports, for greedy
decoding and for --samples completions per prompt sampled at --temperature
(plain sampling unless --top-p/--top-k are given):
  exact     the first <answer>…</answer> holds the record's answer
            (posttrainllm's reward "exact": trimmed, compared as numbers)
  tagged    the completion contains <answer>…</answer> at all
  format    the whole completion is an <answer>…</answer> block, optionally
            after a <think>…</think> one (posttrainllm's reward "format")
  contains  the right sum appears anywhere in the completion as a number,
            tagged or not (what a format reward alone could build on)
and, sampled, the prompts with at least one exact completion (GRPO learns
from a group only when its rewards differ). The last line is the summary as
JSON; --show N prints N completions of each kind first.
"""
import argparse
import json
import re
import sys
import time

import mlx.core as mx
from mlx_lm import load
from mlx_lm.generate import batch_generate
from mlx_lm.sample_utils import make_sampler

# posttrainllm's rl.DefaultAnswerPattern and DefaultFormatPattern and its
# answer comparison, as the GRPO comparison's reward functions hold them.
from grpo_rewards import ANSWER, FORMAT, _same as same_answer  # noqa: E402  (this script's folder)


def score(text, want):
    m = ANSWER.search(text)
    return {"exact": bool(m and same_answer(m.group(1), want)),
            "tagged": bool(m), "format": bool(FORMAT.match(text)),
            "contains": re.search(r"(?<![\d.])%s(?!\.?\d)" % re.escape(str(want).strip()), text) is not None}


KINDS = ("exact", "tagged", "format", "contains")


def render(tokenizer, prompt):
    ids = tokenizer.apply_chat_template([{"role": "user", "content": prompt}],
                                        add_generation_prompt=True, tokenize=True)
    if isinstance(ids, dict) or hasattr(ids, "keys"):
        ids = ids["input_ids"]
    return list(ids)


def generate(model, tokenizer, prompts, max_tokens, sampler, batch):
    out = []
    for i in range(0, len(prompts), batch):
        r = batch_generate(model, tokenizer, prompts[i:i + batch], max_tokens=max_tokens,
                           sampler=sampler, completion_batch_size=batch, prefill_batch_size=batch)
        out.extend(r.texts)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="Hugging Face or MLX model folder")
    ap.add_argument("--adapter", help="LoRA adapter folder (mlx-lm or mlx-lm-lora) to apply")
    ap.add_argument("--data", required=True, help="jsonl with prompt and answer fields")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--samples", type=int, default=8, help="sampled completions per prompt (0: greedy only)")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--top-k", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch", type=int, default=32, help="sequences decoded at a time")
    ap.add_argument("--device", choices=["cpu", "gpu"], help="MLX device (default MLX's)")
    ap.add_argument("--show", type=int, default=3, help="completions to print of each kind")
    a = ap.parse_args()
    if a.max_tokens < 1 or a.samples < 0 or a.batch < 1 or a.temperature <= 0:
        ap.error(f"--max-tokens {a.max_tokens}, --samples {a.samples}, --batch {a.batch}, --temperature {a.temperature}: "
                 "want a positive budget, batch and temperature and a non-negative sample count")
    if a.device:
        mx.set_default_device(mx.cpu if a.device == "cpu" else mx.gpu)
    mx.random.seed(a.seed)

    model, tokenizer = load(a.model, adapter_path=a.adapter)
    recs = [json.loads(l) for l in open(a.data) if l.strip()]
    if not recs or any("prompt" not in r or "answer" not in r for r in recs):
        sys.exit(f"greedy_accuracy: {a.data}: want jsonl records with prompt and answer fields")
    prompts = [render(tokenizer, r["prompt"]) for r in recs]
    summary = {"model": a.model, "adapter": a.adapter, "prompts": len(recs), "max_tokens": a.max_tokens}

    t = time.perf_counter()
    greedy = generate(model, tokenizer, prompts, a.max_tokens, None, a.batch)
    summary["greedy_s"] = round(time.perf_counter() - t, 2)
    scores = [score(x, r["answer"]) for x, r in zip(greedy, recs)]
    for k in KINDS:
        summary["greedy_" + k] = sum(s[k] for s in scores)
    for i in range(min(a.show, len(greedy))):
        print(f"greedy {recs[i]['answer']!r:>6}: {greedy[i]!r}")

    if a.samples:
        sampler = make_sampler(a.temperature, top_p=a.top_p, top_k=a.top_k)
        expanded = [p for p in prompts for _ in range(a.samples)]
        t = time.perf_counter()
        sampled = generate(model, tokenizer, expanded, a.max_tokens, sampler, a.batch)
        summary["sampled_s"] = round(time.perf_counter() - t, 2)
        scores = [score(x, recs[i // a.samples]["answer"]) for i, x in enumerate(sampled)]
        n = len(scores)
        summary.update(samples=a.samples, temperature=a.temperature, top_p=a.top_p, top_k=a.top_k, sampled=n)
        for k in KINDS:
            summary["sampled_" + k] = sum(s[k] for s in scores)
            summary["sampled_%s_fraction" % k] = round(sum(s[k] for s in scores) / n, 4)
        summary["prompts_with_an_exact_sample"] = sum(
            any(s["exact"] for s in scores[i:i + a.samples]) for i in range(0, n, a.samples))
        for kind in ("exact", "tagged"):
            shown = [(i, x) for i, (x, s) in enumerate(zip(sampled, scores)) if s[kind]][:a.show]
            for i, x in shown:
                print(f"sampled {kind} {recs[i // a.samples]['answer']!r:>6}: {x!r}")
        for i, x in [(i, x) for i, (x, s) in enumerate(zip(sampled, scores)) if not s["tagged"]][:a.show]:
            print(f"sampled untagged {recs[i // a.samples]['answer']!r:>6}: {x!r}")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
