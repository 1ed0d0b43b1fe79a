"""Reads the runs of scripts/grpo-vs-mlxlmlora.sh into one record each, and
prints them as a markdown table with ratios ours ÷ theirs.

    grpo_report.py ours --run RUN_DIR --log LOG [--time TIME_V] [--completions N]
    grpo_report.py theirs --raw GRPO_TIMED_JSON [--time TIME_V]
    grpo_report.py table RESULT.json...

A record: {"tool", "updates": [{"total_s", "rollout_s", "update_s", "tokens"}],
"mlx_peak_bytes", "rss_peak_bytes", "load_s"}; a value a tool does not
report is null.

posttrainllm's side is read tolerantly: every JSON object in RUN_DIR/
metrics.jsonl and in the log (a line that is one, or that holds one after a
prefix) with a step number is an update. Its time is the first of total_s,
step_s, update_total_s, or the difference of elapsed_s between updates
(the first update: its elapsed_s), or rollout_s + update_s; its rollout the
first of rollout_s, rollout_seconds, generation_s, generate_s, rollout_ms/1000;
the rest (scoring, backward, optimizer) total − rollout. Completion tokens:
completion_tokens, generated_tokens, tokens_generated, or a mean length
(length_mean, mean_completion_tokens, completion_length_mean) × N.
The MLX peak is the largest peak_memory_bytes (or peak_memory in GB).
"""
import argparse
import json
import math
import os
import re
import statistics
import sys


def rss_from_time(path):
    """Peak RSS in bytes from /usr/bin/time -v's output, or None."""
    if not path or not os.path.exists(path):
        return None
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", open(path).read())
    return int(m.group(1)) * 1024 if m else None


def json_objects(path):
    """The JSON objects of a file's lines, whole or after a prefix."""
    if not path or not os.path.exists(path):
        return []
    out = []
    for line in open(path, errors="replace"):
        line = line.strip()
        i = line.find("{")
        if i < 0:
            continue
        try:
            v = json.loads(line[i:])
        except ValueError:
            continue
        if isinstance(v, dict):
            out.append(v)
    return out


def first(d, *keys, scale=1.0):
    for k in keys:
        v = d.get(k)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            return v * scale
    return None


STEP_KEYS = ("step", "update", "iteration", "iter")


def ours(a):
    objs = json_objects(os.path.join(a.run, "metrics.jsonl")) + json_objects(a.log)
    by_step = {}
    for o in objs:
        if isinstance(o.get("aux"), dict):  # metrics.jsonl keeps an objective's figures under "aux"
            o = {**o, **o["aux"]}
        step = first(o, *STEP_KEYS)
        if step is None or not any(k.endswith("_s") or k.endswith("_ms") for k in o):
            continue
        by_step.setdefault(int(step), {}).update(o)  # a step's lines merge
    updates, prev_elapsed, peaks = [], None, []
    for step in sorted(by_step):
        o = by_step[step]
        rollout = first(o, "rollout_s", "rollout_seconds", "generation_s", "generate_s")
        if rollout is None:
            rollout = first(o, "rollout_ms", scale=1e-3)
        upd = first(o, "update_s", "step_update_s", "train_s", "optimizer_s")
        elapsed = first(o, "elapsed_s")
        total = first(o, "total_s", "step_s", "update_total_s")
        if total is None and elapsed is not None:
            total = elapsed - prev_elapsed if prev_elapsed is not None else elapsed
        if total is None and rollout is not None and upd is not None:
            total = rollout + upd
        if elapsed is not None:
            prev_elapsed = elapsed
        tokens = first(o, "completion_tokens", "generated_tokens", "tokens_generated")
        if tokens is None and a.completions:
            mean = first(o, "completion_len", "length_mean", "mean_completion_tokens", "completion_length_mean")
            tokens = mean * a.completions if mean is not None else None
        rest = total - rollout if total is not None and rollout is not None else upd
        updates.append({"step": step, "total_s": total, "rollout_s": rollout, "update_s": rest,
                        "reported_update_s": upd, "tokens": tokens,
                        "reward_mean": first(o, "reward_mean", "reward", "rewards_mean")})
        peak = first(o, "peak_memory_bytes")
        if peak is None:
            peak = first(o, "peak_memory", scale=1e9)
        if peak is not None:
            peaks.append(peak)
    if not updates:
        sys.exit(f"grpo_report: no per-update metrics in {a.run}/metrics.jsonl or {a.log}")
    return {"tool": "posttrainllm", "updates": updates, "mlx_peak_bytes": max(peaks) if peaks else None,
            "rss_peak_bytes": rss_from_time(a.time), "load_s": None}


def theirs(a):
    raw = json.load(open(a.raw))
    updates = [{"total_s": u.get("total_s"), "rollout_s": u.get("rollout_s"),
                # the rest: rewards and advantages, scoring, backward, optimizer
                "update_s": (u["total_s"] - u["rollout_s"]) if "total_s" in u and "rollout_s" in u else None,
                "tokens": u.get("tokens"), "reward_mean": u.get("reward_mean")}
               for u in raw.get("updates", []) if "total_s" in u]
    if not updates:
        sys.exit(f"grpo_report: {a.raw} has no finished update")
    rss = rss_from_time(a.time) or raw.get("rss_peak_bytes")
    return {"tool": raw.get("tool", "mlx-lm-lora"), "updates": updates, "mlx_peak_bytes": raw.get("mlx_peak_bytes"),
            "rss_peak_bytes": rss, "load_s": raw.get("load_s"), "settings": raw.get("settings")}


def median(vals):
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


def summarise(records):
    """One tool's runs: medians over the updates after each run's first
    (all first updates when every run has one update only)."""
    ups = [r["updates"] for r in records]
    later = [u for us in ups for u in us[1:]] or [u for us in ups for u in us[:1]]
    s = {"runs": len(records), "updates": sum(len(us) for us in ups),
         "s_update": median(u.get("total_s") for u in later),
         "first_s": median(us[0].get("total_s") for us in ups),
         "rollout_s": median(u.get("rollout_s") for u in later),
         "rest_s": median(u.get("update_s") for u in later),
         "tokens": median(u.get("tokens") for u in later)}
    s["rollout_share"] = s["rollout_s"] / s["s_update"] if s["rollout_s"] is not None and s["s_update"] else None
    s["tok_s"] = s["tokens"] / s["rollout_s"] if s["tokens"] is not None and s["rollout_s"] else None
    s["mlx_peak"] = max((r["mlx_peak_bytes"] for r in records if r.get("mlx_peak_bytes")), default=None)
    s["rss_peak"] = max((r["rss_peak_bytes"] for r in records if r.get("rss_peak_bytes")), default=None)
    return s


COLUMNS = [("s/update", "s_update", "%.2f"), ("first update s", "first_s", "%.2f"),
           ("rollout s", "rollout_s", "%.2f"), ("rest s", "rest_s", "%.2f"), ("rollout share", "rollout_share", "%.0f%%"),
           ("completion tokens", "tokens", "%.0f"), ("rollout tok/s", "tok_s", "%.1f"),
           ("MLX peak", "mlx_peak", "GiB"), ("peak RSS", "rss_peak", "GiB")]


def cell(v, fmt):
    if v is None:
        return "–"
    if fmt == "GiB":
        return "%.2f GiB" % (v / 2**30)
    if fmt.endswith("%%"):
        return fmt % (v * 100)
    return fmt % v


def table(a):
    by_tool = {}
    for path in a.results:
        r = json.load(open(path))
        by_tool.setdefault(r["tool"], []).append(r)
    if not by_tool:
        sys.exit("grpo_report: no results")
    sums = {t: summarise(rs) for t, rs in by_tool.items()}
    lines = ["| tool | runs × updates | " + " | ".join(c[0] for c in COLUMNS) + " |",
             "|---|---|" + "---|" * len(COLUMNS)]
    for t, s in sums.items():
        lines.append(f"| {t} | {s['runs']} × {s['updates'] // s['runs']} | " +
                     " | ".join(cell(s[k], f) for _, k, f in COLUMNS) + " |")
    ours_s, theirs_s = sums.get("posttrainllm"), next((s for t, s in sums.items() if t != "posttrainllm"), None)
    if ours_s and theirs_s:
        ratio = lambda k: (ours_s[k] / theirs_s[k]) if ours_s[k] is not None and theirs_s[k] else None  # noqa: E731
        lines.append("| ours ÷ theirs | | " + " | ".join(cell(ratio(k), "%.2f") for _, k, _ in COLUMNS) + " |")
    print("\n".join(lines))
    print("\ns/update, rollout and rest: medians over the updates after each run's first (loading excluded); "
          "rest = the update less its rollout (rewards, scoring, backward, optimizer). "
          "MLX peak: since training started; peak RSS: the whole process, loading included.")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    o = sub.add_parser("ours")
    o.add_argument("--run", required=True)
    o.add_argument("--log")
    o.add_argument("--time")
    o.add_argument("--completions", type=int, default=0, help="completions per update (prompts × group)")
    t = sub.add_parser("theirs")
    t.add_argument("--raw", required=True)
    t.add_argument("--time")
    tb = sub.add_parser("table")
    tb.add_argument("results", nargs="*")
    a = ap.parse_args()
    if a.cmd == "table":
        table(a)
    else:
        print(json.dumps(ours(a) if a.cmd == "ours" else theirs(a)))


if __name__ == "__main__":
    main()
