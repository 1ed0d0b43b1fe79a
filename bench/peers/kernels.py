"""Summarises Nsight Compute's per-kernel durations of one training step.

    ncu --csv --page raw --metrics gpu__time_duration.sum --log-file one.csv CMD --steps 1
    ncu ... --log-file two.csv CMD --steps 2
    python3 kernels.py --label NAME one.csv two.csv

With two files, the step is their difference (the second run did one step
more; set-up kernels cancel). Prints markdown: kernels per step, summed
kernel time per step, a breakdown by kind and the slowest kernels.
"""

import argparse
import csv
import re
from collections import defaultdict

KINDS = [
    # cuDNN's attention kernels are named sm90_...: attention comes first.
    ("attention (SDPA)", re.compile(r"sdpa|attention|flash|fmha|cudnn", re.I)),
    ("matmul (cuBLAS/CUTLASS)", re.compile(r"gemm|cutlass|xmma|sm90_|cublas|nvjet|matmul", re.I)),
    ("cross-entropy / softmax / logsumexp", re.compile(r"cross_entropy|softmax|logsumexp", re.I)),
    ("normalisation (RMSNorm)", re.compile(r"rms|norm", re.I)),
    ("RoPE", re.compile(r"rope", re.I)),
    ("attention's heads (the model's kernels)", re.compile(r"ptlm_heads")),
    # MLX names a compiled kernel after its operations and their dtypes
    # (mlx::GV2IBroadcast…, mlx::Ef4IAdd…): before copy / cast, which
    # "Broadcast" would match.
    ("fused elementwise (compiled)", re.compile(r"mlx::[A-Z]+(V2|f4|f2|i4|b1)I|compiled|fused|triton_|elementwise")),
    ("elementwise (one op)", re.compile(r"binary|unary|ternary")),
    ("reduction", re.compile(r"reduce|sum_|all_reduce|row_reduce|col_reduce", re.I)),
    ("gather / scatter / index", re.compile(r"gather|scatter|index|take", re.I)),
    ("copy / cast", re.compile(r"copy|cast|convert|fill|zeros", re.I)),
]


def kind(name):
    for k, rx in KINDS:
        if rx.search(name):
            return k
    return "other"


def load(path):
    """Returns {kernel name: [count, total ns]} from an ncu raw CSV."""
    with open(path, newline="") as f:
        lines = [l for l in f if l.startswith('"')]
    rows = list(csv.reader(lines))
    head = rows[0]
    name_col = head.index("Kernel Name")
    t_col = head.index("gpu__time_duration.sum")
    unit = rows[1][t_col] if len(rows) > 1 else "nsecond"
    scale = {"nsecond": 1, "usecond": 1e3, "msecond": 1e6, "second": 1e9}.get(unit, 1)
    out = defaultdict(lambda: [0, 0.0])
    for r in rows[1:]:
        if len(r) <= t_col:
            continue
        try:
            t = float(r[t_col].replace(",", ""))
        except ValueError:
            continue
        e = out[r[name_col]]
        e[0] += 1
        e[1] += t * scale
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--label", default="")
    p.add_argument("--top", type=int, default=12)
    p.add_argument("--step-ms", type=float, default=0, help="measured ms/step, for the busy fraction")
    p.add_argument("files", nargs="+")
    args = p.parse_args()
    a = load(args.files[0])
    if len(args.files) > 1:
        b = load(args.files[1])
        per = {n: [b[n][0] - a.get(n, [0, 0])[0], b[n][1] - a.get(n, [0, 0])[1]] for n in b}
        note = "difference of a 2-step and a 1-step run"
    else:
        per = dict(a)
        note = "whole run (set-up kernels included)"
    per = {n: v for n, v in per.items() if v[0] > 0}
    count = sum(v[0] for v in per.values())
    total_ms = sum(v[1] for v in per.values()) / 1e6
    print(f"### {args.label}: {count} kernels per step, {total_ms:.2f} ms of kernel time per step ({note})\n")
    if args.step_ms:
        print(f"Measured {args.step_ms:.2f} ms/step: the GPU runs kernels {100 * total_ms / args.step_ms:.0f}% of the step.\n")
    kinds = defaultdict(lambda: [0, 0.0])
    for n, (c, t) in per.items():
        k = kinds[kind(n)]
        k[0] += c
        k[1] += t
    print("| kind | kernels/step | ms/step | share |")
    print("|---|---|---|---|")
    for k, (c, t) in sorted(kinds.items(), key=lambda kv: -kv[1][1]):
        print(f"| {k} | {c} | {t / 1e6:.3f} | {100 * t / 1e6 / total_ms:.1f}% |")
    print(f"\n| slowest kernels | launches/step | ms/step | µs each |")
    print("|---|---|---|---|")
    for n, (c, t) in sorted(per.items(), key=lambda kv: -kv[1][1])[: args.top]:
        short = n if len(n) <= 90 else n[:87] + "..."
        print(f"| `{short}` | {c} | {t / 1e6:.3f} | {t / 1e3 / c:.1f} |")
    print()


if __name__ == "__main__":
    main()
