"""Measures an OpenAI-compatible server's generation throughput as clients
see it: for each count of concurrent clients, total completion tokens per
second of wall time and the mean time to first token, every client asking
--per-client streamed greedy completions of at most --tokens tokens, one
after another. It speaks only the API, so the same run measures
posttrainllm serve and mlx_lm.server on the same model.

  serve-bench.py URL MODEL [--tokens N] [--clients 1,8,32] [--per-client K] [--json]

--json prints one JSON object per client count as it is measured. A
request whose connection is refused or reset counts as failed (the row's
"failed"), not as tokens.

usage.completion_tokens (from stream_options.include_usage) is what
counts. Python's standard library alone: it runs wherever python3 does.
"""

import argparse
import concurrent.futures
import json
import time
import urllib.request


def ask(url, model, i, tokens):
    body = json.dumps({"model": model, "prompt": f"Once upon a time, in the story numbered {i}, ", "max_tokens": tokens,
                       "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}).encode()
    req = urllib.request.Request(url + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
    start = time.perf_counter()
    first, n = None, 0
    with urllib.request.urlopen(req, timeout=3600) as resp:
        for line in resp:
            line = line.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if first is None and chunk.get("choices") and chunk["choices"][0].get("text"):
                first = time.perf_counter() - start
            if chunk.get("usage"):
                n = chunk["usage"]["completion_tokens"]
    return n, first if first is not None else time.perf_counter() - start


def main():
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("model")
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--clients", default="1,8,32")
    p.add_argument("--per-client", type=int, default=2)
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    client = a.url
    ask(client, a.model, -1, 4)  # warm-up: first kernels, caches
    for c in [int(s) for s in a.clients.split(",")]:
        def client_run(k):
            out = []
            for j in range(a.per_client):
                try:
                    out.append(ask(client, a.model, k * a.per_client + j, a.tokens))
                except OSError as e:  # a refused or reset connection counts as a failed request
                    out.append(e)
            return out
        with concurrent.futures.ThreadPoolExecutor(c) as pool:
            ask(client, a.model, -2, 4)
            t = time.perf_counter()
            results = [r for f in [pool.submit(client_run, k) for k in range(c)] for r in f.result()]
            wall = time.perf_counter() - t
        ok = [r for r in results if not isinstance(r, Exception)]
        tokens = sum(n for n, _ in ok)
        row = {"clients": c, "requests": len(results), "failed": len(results) - len(ok), "completion_tokens": tokens,
               "wall_s": wall, "tokens_per_s": tokens / wall, "ttft_ms": 1e3 * sum(f for _, f in ok) / max(len(ok), 1)}
        if a.json:
            print(json.dumps(row), flush=True)
        else:
            print(f"{c:3d} clients: {tokens} tokens in {wall:.2f} s = {row['tokens_per_s']:.1f} tokens/s, "
                  f"mean time to first token {row['ttft_ms']:.0f} ms, {row['failed']} failed", flush=True)


if __name__ == "__main__":
    main()
