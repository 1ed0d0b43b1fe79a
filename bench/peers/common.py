"""Shared pieces of the peer benchmarks: the preset, the schedule, the data
and the result record, so MLX Python and PyTorch do exactly the work that
`posttrainllm bench` does and report it in the same JSON fields."""

import argparse
import json
import math
import os
import statistics
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))

# posttrainllm's bench samples windows from this many synthetic tokens.
SYNTHETIC_TOKENS = 1 << 18


def parse_args(description, extra=None):
    """Parses the flags every peer takes; extra(parser) adds its own."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--preset", default="huge", help="preset name under presets/ (default huge)")
    p.add_argument("--warmup", type=int, default=10, help="untimed steps (compilation happens here)")
    p.add_argument("--steps", type=int, default=50, help="timed steps")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--device", choices=["gpu", "cpu"], default="gpu")
    p.add_argument("--batch", type=int, help="override the preset's batch (smoke tests)")
    p.add_argument("--context", type=int, help="override the preset's context (smoke tests)")
    p.add_argument("--layers", type=int, help="override the preset's layers (smoke tests)")
    p.add_argument("--accum", type=int, help="override the preset's gradient accumulation")
    p.add_argument("--gelu", choices=["exact", "tanh"], help="override the preset's GELU")
    if extra:
        extra(p)
    return p.parse_args()


def load_preset(args):
    """Returns the preset's JSON object (a train.Config) with the defaults
    the Go side fills in for fields a preset may leave out, and the
    command line's overrides applied."""
    with open(os.path.join(ROOT, "presets", args.preset + ".json")) as f:
        cfg = json.load(f)
    cfg["_name"] = args.preset
    m = cfg["model"]
    if args.batch:
        cfg["batch"] = args.batch
    if args.context:
        m["context"] = args.context
    if args.layers:
        m["layers"] = args.layers
    if args.accum:
        cfg["accum"] = args.accum
    if args.gelu:
        m["gelu"] = args.gelu
    m.setdefault("gelu", "exact")
    m.setdefault("mlp_ratio", 4)
    m.setdefault("rope_base", 10000)
    m.setdefault("norm_eps", 1e-5)
    m.setdefault("init_std", 0.02)
    cfg.setdefault("accum", 1)
    return cfg


def hidden(m):
    """The MLP's inner width, round(mlp_ratio·d_model) as model.Config.Hidden."""
    return int(round(m["mlp_ratio"] * m["d_model"]))


def padded_vocab(m):
    """The embedding/head rows, model.Config.PaddedVocab: vocab_size rounded
    up to a multiple of pad_vocab_to (the padding logits are masked to -inf)."""
    v, pad = m["vocab_size"], m.get("pad_vocab_to", 0)
    return v if pad <= 1 else -(-v // pad) * pad


def num_params(m):
    """The parameter count of model.Config.NumParams."""
    d, h, v, L = m["d_model"], hidden(m), padded_vocab(m), m["layers"]
    n = v * d + L * (2 * d + 4 * d * d + 2 * d * h) + d
    if m.get("embed_norm"):
        n += d
    if not m.get("tied_embeddings"):
        n += v * d
    return n


def flops_per_token(m):
    """Training FLOPs per token, the formula of model.Config.FLOPsPerToken:
    6·N (the embedding lookup excluded unless the head is tied) plus
    attention's 12·L·D·T."""
    n = num_params(m)
    if not m.get("tied_embeddings"):
        n -= padded_vocab(m) * m["d_model"]
    return 6 * n + 12 * m["layers"] * m["d_model"] * m["context"]


def cosine_lr(cfg, step, total):
    """optim.WarmupCosine as `posttrainllm bench` sets it up: the warm-up
    shortened to at most half of the bench's steps."""
    peak, low = cfg["lr"], cfg.get("min_lr", 0.0)
    warmup = min(cfg.get("warmup", 0), total // 2)
    step = max(step, 0)
    if step < warmup:
        return peak * (step + 1) / (warmup + 1)
    if step >= total:
        return low
    span = total - 1 - warmup
    if span <= 0:
        return peak
    progress = (step - warmup) / span
    return low + (peak - low) * 0.5 * (1 + math.cos(math.pi * progress))


class Batches:
    """Random windows of a seeded uniform token stream, as `posttrainllm
    bench` draws without a corpus: x and y are [accum, batch, context] int32,
    y shifted by one token."""

    def __init__(self, cfg, seed):
        import numpy as np  # here, so table.py runs without numpy

        self.np = np
        m = cfg["model"]
        self.n, self.b, self.t = cfg["accum"], cfg["batch"], m["context"]
        self.rng = np.random.default_rng(seed)
        size = max(SYNTHETIC_TOKENS, 2 * (self.t + 1))
        self.tokens = self.rng.integers(0, m["vocab_size"], size=size, dtype=np.int32)

    def next(self):
        np = self.np
        starts = self.rng.integers(0, len(self.tokens) - self.t - 1, size=self.n * self.b)
        idx = starts[:, None] + np.arange(self.t + 1)[None, :]
        w = self.tokens[idx].reshape(self.n, self.b, self.t + 1)
        return np.ascontiguousarray(w[..., :-1]), np.ascontiguousarray(w[..., 1:])


class Timer:
    """Collects per-step wall times (ms) of the timed steps and the losses."""

    def __init__(self, warmup):
        self.warmup = warmup
        self.times = []
        self.cpu_start = None
        self.cpu_end = None
        self.loss_first = None
        self.loss_last = None

    def record(self, i, seconds, loss):
        if not math.isfinite(loss):
            raise SystemExit(f"step {i + 1}: loss is {loss}")
        if self.loss_first is None:
            self.loss_first = loss
        self.loss_last = loss
        if i >= self.warmup:
            self.times.append(seconds * 1e3)
            self.cpu_end = time.process_time()

    def start(self, i):
        """Marks the start of step i: CPU time counts from the first timed step."""
        if i == self.warmup:
            self.cpu_start = time.process_time()


def pipelined(steps, every, run, wait):
    """Wall time per step (ms) of `steps` steps run as posttrainllm's
    trainer runs them (bench's ms_per_step_pipelined): run(i) starts step i
    and returns its loss without waiting for it; wait(loss) waits for the
    device and reads the loss back, every `every` steps and after the last
    (which must also wait for the whole step)."""
    start = now()
    for i in range(steps):
        loss = run(i)
        if (i + 1) % every == 0 or i == steps - 1:
            value = wait(loss)
            if not math.isfinite(value):
                raise SystemExit(f"pipelined step {i + 1}: loss is {value}")
    return (now() - start) * 1e3 / steps


def quantile(xs, q):
    """Linear interpolation between order statistics, as train.quantile."""
    s = sorted(xs)
    pos = q * (len(s) - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def report(name, cfg, args, timer, peak_bytes, extra=None):
    """Prints the one-line JSON result in posttrainllm bench's field names."""
    m = cfg["model"]
    tokens = cfg["batch"] * cfg["accum"] * m["context"]
    total_s = sum(timer.times) / 1e3
    steps_per_s = len(timer.times) / total_s
    out = {
        "impl": name,
        "preset": cfg.get("_name", ""),
        "device": args.device,
        "schedule": "cosine",
        "optimizer": cfg["optimizer"],
        "dtype": m["dtype"],
        "accum": cfg["accum"],
        "batch": cfg["batch"],
        "context": m["context"],
        "tokens_per_step": tokens,
        "params": num_params(m),
        "flops_per_token": flops_per_token(m),
        "warmup_steps": timer.warmup,
        "steps": len(timer.times),
        "ms_per_step_median": statistics.median(timer.times),
        "ms_per_step_p10": quantile(timer.times, 0.1),
        "ms_per_step_p90": quantile(timer.times, 0.9),
        "steps_per_s": steps_per_s,
        "tokens_per_s": steps_per_s * tokens,
        # CPU time of the process (all threads) over the timed steps, per
        # step, where the peer marks its steps with Timer.start.
        "cpu_ms_per_step": (timer.cpu_end - timer.cpu_start) * 1e3 / len(timer.times)
        if timer.cpu_start is not None else None,
        "peak_memory_bytes": int(peak_bytes),
        "loss_first": timer.loss_first,
        "loss_last": timer.loss_last,
    }
    if extra:
        out.update(extra)
    print(json.dumps(out), flush=True)


def loaded_library(name):
    """The real path of the shared library whose file name starts with
    name, as this process mapped it (Linux), or "" if none is found: shows
    which libmlx.so a peer runs on."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1]
                if os.path.basename(path).startswith(name):
                    return os.path.realpath(path)
    except OSError:
        pass
    return ""


now = time.perf_counter
