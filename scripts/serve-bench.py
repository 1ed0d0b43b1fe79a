"""Measures posttrainllm serve's generation throughput through the OpenAI
API, as clients see it: completion tokens per second of wall time for one
client asking one question after another, and for CLIENTS clients asking at
once (the server runs one generation at a time, so concurrency shows the
queue's cost, not batching).

  serve-bench.py URL MODEL [--tokens N] [--requests R] [--clients C]

Every request is a greedy completion of a short prompt, at most --tokens
tokens (usage.completion_tokens is what counts).
Needs the pinned openai client (.deps/py, make py-deps).
"""

import argparse
import concurrent.futures
import time

from openai import OpenAI


def ask(client, model, i, tokens):
    r = client.completions.create(model=model, prompt=f"ROMEO {i}:", max_tokens=tokens, temperature=0)
    return r.usage.completion_tokens


def main():
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("model")
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--requests", type=int, default=8)
    p.add_argument("--clients", type=int, default=8)
    a = p.parse_args()
    client = OpenAI(base_url=a.url + "/v1", api_key="unused", max_retries=0, timeout=3600)
    ask(client, a.model, -1, 4)  # warm-up: first kernels, caches
    t = time.perf_counter()
    n = sum(ask(client, a.model, i, a.tokens) for i in range(a.requests))
    one = n / (time.perf_counter() - t)
    t = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(a.clients) as pool:
        n = sum(pool.map(lambda i: ask(client, a.model, i, a.tokens), range(a.requests)))
    many = n / (time.perf_counter() - t)
    print(f"{a.model}: 1 client {one:.1f} tokens/s, {a.clients} clients {many:.1f} tokens/s "
          f"({a.requests} requests of {a.tokens} tokens each; ratio {many / one:.2f})")


if __name__ == "__main__":
    main()
