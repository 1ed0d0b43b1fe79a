"""mlx-lm-lora's GRPO training (mlx_lm_lora.train) with each update timed, for
scripts/grpo-vs-mlxlmlora.sh. The installed package is not changed: this
script replaces, in its modules' namespaces, the functions train_grpo calls.

    python grpo_timed.py --report OUT.json [--device cpu|gpu] [--top-p 1]
        [--top-k 0] [--stop-at-answer] [--sequential] -- TRAIN_ARGS...

TRAIN_ARGS are mlx_lm_lora.train's (--model, --train-mode grpo, ...).

Per update it records
  rollout_s  generate_grpo: the group's completions (prefill and decode)
  reward_s   _rollout_rewards: the reward functions and group advantages
  update_s   from the rewards to the end of the update: scoring, backward,
             the optimizer and mx.eval of the new state (train_grpo's step
             and its mx.eval; reported through a TrainingCallback, so
             --steps-per-report must be 1)
  total_s    the whole update, from the last one's end (the first: from its
             rollout's start; the batch draw before it is a list lookup)
  tokens     completion tokens sampled (stop tokens included)
and for the run: load_s (process start to training), the MLX peak memory
since training started (mx.reset_peak_memory when train_grpo is entered:
both models are loaded by then), and the peak RSS of the process.

Settings mlx-lm-lora has no flag for, set on its GRPOTrainingArgs here:
  --top-p, --top-k  its sampler (fixed at 0.95 and 20; 1 and 0 turn them off)
  --stop-at-answer  stop a completion at </answer> as well as at the end
                    token (its default; without the flag only the end token
                    stops it, as a plain sampler does)
  --sequential      take the training records in file order, --batch-size
                    per update, instead of its shuffled length-sorted batches,
                    so that another tool given the same file samples from the
                    same prompts at each update.
"""
import argparse
import json
import resource
import sys
import time

T_START = time.perf_counter()

import mlx.core as mx  # noqa: E402
import mlx_lm_lora.train as lora_train  # noqa: E402
import mlx_lm_lora.trainer.grpo_trainer as grpo  # noqa: E402
from mlx_lm.tuner.callbacks import TrainingCallback  # noqa: E402


def parse():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--report", required=True, help="JSON file the timings are written to")
    ap.add_argument("--device", choices=["cpu", "gpu"], help="MLX's default device (default MLX's)")
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--top-k", type=int, default=0)
    ap.add_argument("--stop-at-answer", action="store_true")
    ap.add_argument("--sequential", action="store_true")
    ap.add_argument("--label", default="mlx-lm-lora")
    if "--" not in sys.argv:
        ap.error("want -- before mlx_lm_lora.train's arguments")
    cut = sys.argv.index("--")
    return ap.parse_args(sys.argv[1:cut]), sys.argv[cut + 1:]


opts, train_argv = parse()
if opts.device:
    mx.set_default_device(mx.cpu if opts.device == "cpu" else mx.gpu)

updates = []  # one dict per update, filled as it runs
run = {"tool": opts.label, "device": str(mx.default_device()), "updates": updates}
clock = {"prev_end": None, "train_start": None}


def current():
    if not updates or "total_s" in updates[-1]:
        updates.append({})
    return updates[-1]


real_generate = grpo.generate_grpo


def timed_generate(*args, **kwargs):
    u = current()
    t = time.perf_counter()
    completions, texts, indices = real_generate(*args, **kwargs)
    u["rollout_start"] = t
    u["rollout_s"] = time.perf_counter() - t
    u["tokens"] = int(sum(int(c.size) for c in completions))
    u["completions"] = len(completions)
    return completions, texts, indices


real_rewards = grpo._rollout_rewards


def timed_rewards(*args, **kwargs):
    t = time.perf_counter()
    out = real_rewards(*args, **kwargs)
    u = current()
    u["reward_s"] = time.perf_counter() - t
    u["rewards_end"] = time.perf_counter()
    return out


class Timer(TrainingCallback):
    """Closes each update when train_grpo reports it (after its mx.eval)."""

    def on_train_loss_report(self, info):
        end = time.perf_counter()
        u = current()
        start = clock["prev_end"] if clock["prev_end"] is not None else u.get("rollout_start", end)
        u["total_s"] = end - start
        u["update_s"] = end - u.get("rewards_end", end)
        u["loss"] = info.get("train_loss")
        u["reward_mean"] = info.get("train_total_rewards_mean")
        for k in ("exact", "format"):
            if f"train_{k}_mean" in info:
                u[f"{k}_mean"] = info[f"train_{k}_mean"]
        u["mean_completion_tokens"] = info.get("train_average_generated_tokens")
        u.pop("rollout_start", None)
        u.pop("rewards_end", None)
        clock["prev_end"] = end

    def on_val_loss_report(self, info):
        # A held-out evaluation inside the loop would count in the next
        # update: the comparison runs without a valid.jsonl.
        run.setdefault("warnings", []).append("held-out evaluation ran inside the timed loop")


def sequential_batches(dataset, batch_size, max_seq_length, train=False):
    """The records in file order, batch_size per update, round and round."""
    n = len(dataset)
    if n < batch_size:
        raise ValueError(f"{n} training records, fewer than the batch of {batch_size}")
    i = 0
    while True:
        items = [dataset[(i + k) % n] for k in range(batch_size)]
        i += batch_size
        yield ([it[0][:max_seq_length] for it in items], [it[1] for it in items],
               [it[2] for it in items], [it[3] for it in items],
               [it[4] for it in items] if len(items[0]) == 5 else None)


real_train_grpo = lora_train.train_grpo


def timed_train_grpo(*args, **kwargs):
    targs = kwargs["args"]
    if targs.steps_per_report != 1:
        raise SystemExit(f"grpo_timed: --steps-per-report is {targs.steps_per_report}, want 1 (each update is timed at its report)")
    targs.top_p, targs.top_k = opts.top_p, opts.top_k
    kwargs["end_answer_token"] = "</answer>" if opts.stop_at_answer else ""
    if opts.sequential:
        kwargs["iterate_batches"] = sequential_batches
    if kwargs.get("training_callback") is not None:
        raise SystemExit("grpo_timed: a training callback (--wandb?) is already set")
    kwargs["training_callback"] = Timer()
    run["settings"] = {k: getattr(targs, k, None) for k in (
        "batch_size", "iters", "group_size", "max_completion_length", "temperature", "top_p", "top_k",
        "min_p", "beta", "epsilon", "epsilon_high", "grpo_loss_type", "importance_sampling_level",
        "reward_weights", "gradient_accumulation_steps", "max_seq_length")}
    run["settings"]["stop_at_answer"] = opts.stop_at_answer
    run["settings"]["sequential"] = opts.sequential
    run["settings"]["reward_functions"] = [f.__name__ for f in kwargs.get("reward_funcs") or []]
    opt = kwargs.get("optimizer")
    run["settings"]["optimizer"] = type(opt).__name__
    for k in ("betas", "eps", "weight_decay", "bias_correction"):
        if hasattr(opt, k):
            v = getattr(opt, k)
            run["settings"]["optimizer_" + k] = v if isinstance(v, (bool, int, float, list, tuple)) else str(v)
    run["ref_model_loaded"] = kwargs.get("ref_model") is not None
    mx.synchronize()
    mx.reset_peak_memory()
    clock["train_start"] = time.perf_counter()
    run["load_s"] = clock["train_start"] - T_START
    try:
        return real_train_grpo(*args, **kwargs)
    finally:
        run["train_s"] = time.perf_counter() - clock["train_start"]
        run["mlx_peak_bytes"] = int(mx.get_peak_memory())


grpo.generate_grpo = timed_generate
grpo._rollout_rewards = timed_rewards
lora_train.train_grpo = timed_train_grpo

sys.argv = ["mlx_lm_lora.train"] + train_argv
try:
    lora_train.main()
finally:
    run["rss_peak_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    with open(opts.report, "w") as f:
        json.dump(run, f, indent=1)
