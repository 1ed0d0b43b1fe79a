"""Builds GPT-2's tokenizer.json from GPT-2's merge ranks and encodes
samples with Hugging Face's tokenizers, for data/hftokenizer/gpt2_test.go.

  gpt2json.py RANKS OUT SAMPLES.json

RANKS has one line per id, the hex of the token's bytes (tiktoken's
r50k_base, as posttrainllm embeds it). The merges are recovered the way
tiktoken's converters do: a token's merge is the last step of BPE on its
bytes with the ranks below its own. Writes OUT/tokenizer.json and
OUT/expected.json: the ids of every sample with <|endoftext|> encoded as
text (encode_special_tokens) and as the special token (tokenizers'
default), no special tokens added.
"""

import json
import os
import sys

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers


def bytes_to_unicode():
    """GPT-2's map from bytes to printable characters."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def bpe(ranks, token, max_rank):
    parts = [bytes([b]) for b in token]
    while True:
        best = None
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and r < max_rank and (best is None or r < best[0]):
                best = (r, i)
        if best is None:
            return parts
        i = best[1]
        parts = parts[:i] + [parts[i] + parts[i + 1]] + parts[i + 2 :]


def main():
    ranks_path, out, samples_path = sys.argv[1:4]
    tokens = [bytes.fromhex(line.strip()) for line in open(ranks_path)]
    ranks = {t: i for i, t in enumerate(tokens)}
    b2u = bytes_to_unicode()
    enc = lambda b: "".join(b2u[x] for x in b)
    vocab = {enc(t): i for i, t in enumerate(tokens)}
    merges = []
    for i, t in enumerate(tokens):
        if len(t) < 2:
            continue
        parts = bpe(ranks, t, i)
        assert len(parts) == 2, (i, t, parts)
        merges.append((enc(parts[0]), enc(parts[1])))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    # As GPT-2's published tokenizer.json has it.
    tok.add_special_tokens([AddedToken("<|endoftext|>", special=True, normalized=True)])
    os.makedirs(out, exist_ok=True)
    tok.save(os.path.join(out, "tokenizer.json"))
    samples = json.load(open(samples_path, encoding="utf-8"))
    special = [tok.encode(s, add_special_tokens=False).ids for s in samples]
    tok.encode_special_tokens = True
    ids = [tok.encode(s, add_special_tokens=False).ids for s in samples]
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump({"ids": ids, "special": special, "eos": tok.token_to_id("<|endoftext|>")}, f)


if __name__ == "__main__":
    main()
