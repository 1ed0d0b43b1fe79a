"""mlx-lm's side of bench --generate: the same measurement of generation.

One stream through stream_generate (what mlx_lm generate runs), then
batch_generate (mlx-lm's continuous-batching generator) at each count of
concurrent streams: every stream a prompt of random token ids and a fixed
budget of greedy tokens with no stop tokens, an untimed pass first. Prints
one JSON object per row with the fields bench --generate --json writes.

    python generate_bench.py MODEL --streams 1,8,32 --prompt-tokens 128 --gen-tokens 128 --rounds 2
"""
import argparse
import json
import random
import time

import mlx.core as mx
from mlx_lm import batch_generate, load, stream_generate


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--streams", default="1,8,32")
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--gen-tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=1)
    a = ap.parse_args()
    model, tok = load(a.model)
    tok._eos_token_ids = set()  # no stop tokens: every stream generates its whole budget
    vocab = model.args.vocab_size
    rng = random.Random(1)
    prompt = lambda: [rng.randrange(vocab) for _ in range(a.prompt_tokens)]
    counts = [int(s) for s in a.streams.split(",")]

    def single(rnd):
        p = prompt()
        start, first, n = time.perf_counter(), None, 0
        for r in stream_generate(model, tok, p, max_tokens=a.gen_tokens):
            n += 1
            if first is None:
                first = time.perf_counter() - start
        wall = time.perf_counter() - start
        assert n == a.gen_tokens, n
        return {"path": "mlx-lm stream_generate", "streams": 1, "round": rnd, "prompt_tokens_per_s": a.prompt_tokens / first,
                "gen_tokens_per_s": (n - 1) / (wall - first), "ttft_ms": first * 1e3, "wall_s": wall}

    def batch(n, rnd):
        ps = [prompt() for _ in range(n)]
        start = time.perf_counter()
        resp = batch_generate(model, tok, ps, max_tokens=a.gen_tokens, return_token_ids=True)
        wall = time.perf_counter() - start
        st = resp.stats
        got = sum(len(t) for t in resp.token_ids) if getattr(resp, "token_ids", None) else n * a.gen_tokens
        return {"path": "mlx-lm batch_generate", "streams": n, "round": rnd, "prompt_tokens_per_s": st.prompt_tps,
                "gen_tokens_per_s": st.generation_tps, "generated": got, "wall_s": wall,
                "peak_memory_bytes": int(mx.get_peak_memory())}

    single(0)
    for n in counts:
        batch(n, 0)
    for rnd in range(1, a.rounds + 1):
        print(json.dumps(single(rnd)), flush=True)
        for n in counts:
            print(json.dumps(batch(n, rnd)), flush=True)


if __name__ == "__main__":
    main()
