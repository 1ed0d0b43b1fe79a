"""Builds the markdown comparison table from one benchmark call's JSON
results: posttrainllm bench --json lines and the peers' lines, with model
FLOPs utilisation against the measured bf16 matmul peak.

    python3 table.py --peak peak.json --preset huge LABEL=result.json ...

Each result file holds one JSON object, indented or on one line.
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def last_json(path):
    """Returns the JSON result in path: the whole file when it is one JSON
    value (posttrainllm bench --json prints an indented object), else the
    last line that parses as a JSON object (the peers print one line)."""
    with open(path) as f:
        text = f.read()
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    obj = None
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                pass
    if obj is None:
        raise SystemExit(f"table: no JSON result in {path}")
    return obj


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--peak", required=True, help="matmul_peak.py's output")
    p.add_argument("--preset", default="huge")
    p.add_argument("--reference", default="", help="label whose steps/s the ratio column divides by")
    p.add_argument("results", nargs="+", help="LABEL=path")
    args = p.parse_args()
    peak = last_json(args.peak)
    cfg = common.load_preset(argparse.Namespace(preset=args.preset, batch=None, context=None, layers=None))
    fpt = common.flops_per_token(cfg["model"])
    rows = []
    for item in args.results:
        label, _, path = item.partition("=")
        if not os.path.exists(path):
            rows.append((label, None))
            continue
        rows.append((label, last_json(path)))
    ref = next((r for l, r in rows if l == args.reference and r), None)
    print(f"bf16 matmul peak, measured in this call: **{peak['tflops']:.0f} TFLOP/s** "
          f"({peak['n']}³ on {peak['device']}); model FLOPs {fpt / 1e6:.1f} M per token "
          f"(6·N + 12·L·D·T).\n")
    head = ["implementation", "ms/step (median)", "p10–p90 ms", "step/s", "tokens/s", "MFU", "peak memory",
            "loss first → last"]
    if ref:
        head.append(f"step/s ÷ {args.reference}")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for label, r in rows:
        if r is None:
            print(f"| {label} | failed (see log) |" + " |" * (len(head) - 2))
            continue
        mfu = r["tokens_per_s"] * fpt / (peak["tflops"] * 1e12)
        cells = [label, f"{r['ms_per_step_median']:.2f}",
                 f"{r['ms_per_step_p10']:.2f}–{r['ms_per_step_p90']:.2f}",
                 f"{r['steps_per_s']:.2f}", f"{r['tokens_per_s']:,.0f}", f"{100 * mfu:.1f}%",
                 f"{r['peak_memory_bytes'] / 2**20:,.0f} MiB",
                 f"{r['loss_first']:.3f} → {r['loss_last']:.3f}"]
        if ref:
            cells.append(f"{r['steps_per_s'] / ref['steps_per_s']:.2f}×")
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
