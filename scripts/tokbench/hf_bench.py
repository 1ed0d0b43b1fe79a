"""The Hugging Face half of scripts/bpe-dropout-bench.sh.

Loads the GPT-2 vocabulary and merges that tokbench wrote, encodes the same
texts with the tokenizers library's encode_batch (Rust, all CPUs) without
and with BPE-dropout, checks that its ids without dropout equal
posttrainllm's, and prints one table of both tools' throughput.

    python hf_bench.py DIR [ROUNDS]
"""

import json
import os
import sys
import time

from tokenizers import Tokenizer, decoders, models, pre_tokenizers


def load(folder, dropout):
    bpe = models.BPE.from_file(
        os.path.join(folder, "vocab.json"),
        os.path.join(folder, "merges.txt"),
        dropout=dropout,
    )
    tok = Tokenizer(bpe)
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return tok


def fastest(fn, rounds):
    best, out = float("inf"), None
    for _ in range(rounds):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def main():
    folder = sys.argv[1]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    with open(os.path.join(folder, "texts.json")) as f:
        texts = json.load(f)
    with open(os.path.join(folder, "go.json")) as f:
        go = json.load(f)
    nbytes = go["bytes"]
    rows = []
    for name, r in sorted(go["rates"].items()):
        rows.append((name, go["tokens"][name], r["seconds"]))
    for p in (None, 0.1):
        tok = load(folder, p)
        secs, encs = fastest(lambda: tok.encode_batch(texts), rounds)
        ids = [e.ids for e in encs]
        if p is None:
            same = sum(a == b for a, b in zip(ids, go["ids_p0"]))
            print(f"hf tokenizers without dropout: {same} of {len(ids)} documents give posttrainllm's ids")
        rows.append((f"HF tokenizers encode_batch dropout={p or 0:g}", sum(map(len, ids)), secs))
    threads = go["threads"]
    print(f"{len(texts)} documents, {nbytes / 1e6:.1f} MB of Go sources, {threads} CPU threads, fastest of {rounds} rounds")
    print(f"{'encoder':<40} {'tokens':>10} {'seconds':>8} {'MB/s':>7} {'Mtok/s':>7}")
    for name, ntok, secs in rows:
        print(f"{name:<40} {ntok:>10} {secs:>8.3f} {nbytes / secs / 1e6:>7.2f} {ntok / secs / 1e6:>7.2f}")


if __name__ == "__main__":
    main()
