"""posttrainllm's training step against the same TinyGPT step written in
MLX C++ (bin/cpp_peer) and MLX Python (mlx_peer.py), all three on the same
libmlx.so, in alternating rounds on the CPU.

Each round runs every implementation once per cell (a cell is compiled or
interpreted × an accumulation count), one process each, in an order
rotated by the round, so a change of machine load falls on all of them
alike. Per round it divides posttrainllm's median ms per step by each
peer's; the table gives those ratios per round and their median, and the
medians of the three implementations' times and losses. A second table
does the same with CPU time per step (the process's, all threads), which
moves less than wall-clock time when other jobs share the machine.

    make build peers
    python3 bench/peers/compare.py --preset small --rounds 5

Every implementation uses the preset's model with the GELU given by --gelu
(default exact), batch and context, the cosine schedule, AdamW and the
preset's gradient clipping, fresh parameters and synthetic tokens.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

import common

GO = os.path.join(common.ROOT, "bin", "posttrainllm")
CPP = os.path.join(common.ROOT, "bin", "cpp_peer")
PYTHONPATH = os.path.join(common.ROOT, ".deps", "peers", "python")


def commands(cfg, preset, compiled, accum, gelu, warmup, steps):
    """The three command lines for one cell, by implementation name."""
    m = cfg["model"]
    batch = cfg["batch"]
    go = [GO, "bench", "--preset", preset, "--device", "cpu", "--schedule", "cosine", "--json",
          "--batch", str(batch), "--accum", str(accum), "--gelu", gelu,
          "--compile=" + ("true" if compiled else "false"),
          "--warmup-steps", str(warmup), "--steps", str(steps)]
    cpp = [CPP, "--vocab", str(common.padded_vocab(m)), "--d-model", str(m["d_model"]),
           "--layers", str(m["layers"]), "--heads", str(m["heads"]), "--context", str(m["context"]),
           "--mlp-ratio", str(m["mlp_ratio"]), "--rope-base", str(m["rope_base"]),
           "--norm-eps", str(m["norm_eps"]), "--init-std", str(m["init_std"]),
           "--tied", str(int(bool(m.get("tied_embeddings")))), "--gelu", gelu,
           "--batch", str(batch), "--accum", str(accum), "--lr", str(cfg["lr"]),
           "--min-lr", str(cfg.get("min_lr", 0)), "--warmup-lr", str(cfg.get("warmup", 0)),
           "--clip", str(cfg.get("grad_clip", 0)), "--compile", str(int(compiled)),
           "--warmup", str(warmup), "--steps", str(steps)]
    py = [sys.executable, os.path.join(common.HERE, "mlx_peer.py"), "--preset", preset, "--device", "cpu",
          "--accum", str(accum), "--gelu", gelu, "--compile", str(int(compiled)),
          "--warmup", str(warmup), "--steps", str(steps)]
    return {"posttrainllm": go, "mlx-cpp": cpp, "mlx-python": py}


def run(cmd):
    """Runs one benchmark process and returns its JSON result."""
    env = dict(os.environ, PYTHONPATH=PYTHONPATH)
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise SystemExit(f"compare: {' '.join(cmd)} failed ({out.returncode}):\n{out.stderr.strip()}")
    start = out.stdout.find("{")  # posttrainllm indents its JSON over several lines
    try:
        return json.JSONDecoder().raw_decode(out.stdout[start:])[0]
    except ValueError:
        raise SystemExit(f"compare: {' '.join(cmd)} printed no JSON result:\n{out.stdout}")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="small")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=20, help="timed steps per process")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps per process")
    p.add_argument("--accum", default="1,4", help="comma-separated accumulation counts")
    p.add_argument("--modes", default="compiled,interpreted", help="compiled, interpreted or both")
    p.add_argument("--gelu", choices=["exact", "tanh"], default="exact")
    p.add_argument("--json", action="store_true", help="print every result as one JSON line")
    args = p.parse_args()
    for path, what in ((GO, "make build"), (CPP, "make peers"), (os.path.join(PYTHONPATH, "mlx"), "make peers")):
        if not os.path.exists(path):
            raise SystemExit(f"compare: {path} is missing; run {what}")
    cfg = common.load_preset(argparse.Namespace(preset=args.preset, batch=None, context=None, layers=None,
                                                accum=None, gelu=None))
    cells = [(mode == "compiled", int(a)) for mode in args.modes.split(",") for a in args.accum.split(",")]
    impls = ["posttrainllm", "mlx-cpp", "mlx-python"]
    results = {}  # (cell, impl) -> [result per round]
    for r in range(args.rounds):
        for cell in cells:
            cmds = commands(cfg, args.preset, cell[0], cell[1], args.gelu, args.warmup, args.steps)
            order = impls[r % 3:] + impls[:r % 3]
            for impl in order:
                res = run(cmds[impl])
                res["round"] = r + 1
                results.setdefault((cell, impl), []).append(res)
                if args.json:
                    print(json.dumps(dict(res, impl_name=impl, compiled=cell[0])), flush=True)
                print(f"round {r + 1} {'compiled' if cell[0] else 'interpreted'} accum {cell[1]} {impl}: "
                      f"{res['ms_per_step_median']:.1f} ms/step, {res['cpu_ms_per_step']:.1f} CPU ms/step",
                      file=sys.stderr, flush=True)

    print(f"\npreset {args.preset}, gelu {args.gelu}, batch {cfg['batch']}, context {cfg['model']['context']}, "
          f"{args.rounds} rounds × {args.warmup} warm-up + {args.steps} timed steps per process")
    for metric, title in (("ms_per_step_median", "wall-clock ms per step (median of the timed steps)"),
                          ("cpu_ms_per_step", "CPU ms per step (process CPU time over the timed steps)")):
        table(results, cells, impls, metric, title)
    print()
    for impl in impls:
        for compiled, accum in cells:
            if not compiled or ((False, accum), impl) not in results:
                continue
            comp, interp = results[((True, accum), impl)], results[((False, accum), impl)]
            for metric, what in (("ms_per_step_median", "wall-clock"), ("cpu_ms_per_step", "CPU time")):
                ratios = [i[metric] / c[metric] for c, i in zip(comp, interp)]
                print(f"{impl} accum {accum}: interpreted ÷ compiled {what} per round "
                      f"{', '.join(f'{x:.2f}' for x in ratios)}, median {statistics.median(ratios):.2f}")


def table(results, cells, impls, metric, title):
    """Prints one markdown table of metric: each implementation's median
    over the rounds, and posttrainllm ÷ each peer per round and median."""
    print(f"\n{title}\n")
    print("| mode | accum | posttrainllm | MLX C++ | MLX Python | ÷ C++ per round | ÷ C++ median "
          "| ÷ Python per round | ÷ Python median | loss first→last (Go / C++ / Python) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for cell in cells:
        go, cpp, py = (results[(cell, i)] for i in impls)
        med = lambda rs: statistics.median(x[metric] for x in rs)
        rc = [g[metric] / c[metric] for g, c in zip(go, cpp)]
        rp = [g[metric] / q[metric] for g, q in zip(go, py)]
        loss = " / ".join(f"{rs[0]['loss_first']:.3f}→{rs[0]['loss_last']:.3f}" for rs in (go, cpp, py))
        print(f"| {'compiled' if cell[0] else 'interpreted'} | {cell[1]} | {med(go):.1f} | {med(cpp):.1f} | "
              f"{med(py):.1f} | {', '.join(f'{x:.2f}' for x in rc)} | {statistics.median(rc):.2f} | "
              f"{', '.join(f'{x:.2f}' for x in rp)} | {statistics.median(rp):.2f} | {loss} |")


if __name__ == "__main__":
    main()
