"""Measures the GPU's bf16 matrix-multiply rate with one large PyTorch
matmul on random data (events around the region, median of the timed
repeats): the peak that the benchmark's model FLOPs utilisation divides by.
Prints one JSON line."""

import argparse
import json
import statistics

import torch


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=8192, help="M = N = K")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--repeats", type=int, default=30)
    args = p.parse_args()
    n = args.n
    g = torch.Generator(device="cuda").manual_seed(0)
    # Three operand sets in rotation so repeats do not run out of one cache.
    ops = [(torch.randn(n, n, device="cuda", dtype=torch.bfloat16, generator=g),
            torch.randn(n, n, device="cuda", dtype=torch.bfloat16, generator=g)) for _ in range(3)]
    out = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
    for i in range(args.warmup):
        a, b = ops[i % 3]
        torch.matmul(a, b, out=out)
    torch.cuda.synchronize()
    times = []
    for i in range(args.repeats):
        a, b = ops[i % 3]
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        torch.matmul(a, b, out=out)
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) / 1e3)
    med = statistics.median(times)
    if not torch.isfinite(out.float().abs().sum()):
        raise SystemExit("matmul_peak: the product is not finite")
    print(json.dumps({"impl": "bf16 matmul peak", "n": n, "seconds_median": med,
                      "tflops": 2 * n ** 3 / med / 1e12, "device": torch.cuda.get_device_name()}), flush=True)


if __name__ == "__main__":
    main()
