"""Independent reference for the SentencePiece tokenizer that hf's GGUF
import makes from tokenizer.ggml.model = llama metadata:

  spm_reference.py FILE.gguf GOT_TOKENIZER_JSON TEXT OUT.json

Builds, with llama.cpp's `gguf` package and the `tokenizers` library's own
Python API (not from GOT_TOKENIZER_JSON), the BPE that SentencePiece's
scores define: spaces as U+2581, for every normal token a merge of each
split of it into two normal tokens ranked by the merged token's score
(highest first), byte fallback to <0xXX>, CONTROL tokens as special added
tokens and USER_DEFINED ones as added tokens matched in the raw text.
Checks that the library gives the same ids with GOT_TOKENIZER_JSON for TEXT
and stress texts, and writes to OUT.json the texts, their ids (special
tokens written in text matched, none added) and the decoding of the ids.
"""

import json
import sys

import numpy as np
from gguf import GGUFReader
from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers

STRESS = [
    "", " ", "  ", "\n\nFirst Citizen:\nBefore we proceed", "{\n\tx = 1;\r\n}\r\n", "trailing   ",
    "  leading and   inner   runs  ", "12345678901 3.14159 1,000,000", "def f(x):\n    return x**2  # square\n",
    "日本語のテキスト、中文字符", "emoji 😀👍🏽 and ZWJ 👨‍👩‍👧", "don't I'LL we've", "a\u00a0b\u2003c",
    "rare: \U0001f9ec\U00010348 \u2e3b \x07 \ufffd", "▁already▁metaspace", "<0x41> is not a byte",
    "<start_of_turn>user\nWhat is the capital of France?<end_of_turn>\n<start_of_turn>model\n",
    "<bos>text<eos> <pad>", "\n\n\n\n\n\n\t\t  \n",
]


def field(r, key):
    f = r.fields[key]
    return [f.parts[i] for i in f.data]


def main():
    path, got_path, text_path, out_path = sys.argv[1:5]
    r = GGUFReader(path)
    tokens = [bytes(p).decode("utf-8") for p in field(r, "tokenizer.ggml.tokens")]
    scores = [float(p[0]) for p in field(r, "tokenizer.ggml.scores")]
    types = [int(p[0]) for p in field(r, "tokenizer.ggml.token_type")]
    unk = tokens[int(field(r, "tokenizer.ggml.unknown_token_id")[0][0])]
    prefix = "tokenizer.ggml.add_space_prefix" in r.fields and bool(field(r, "tokenizer.ggml.add_space_prefix")[0][0])
    vocab = {t: i for i, t in enumerate(tokens)}
    normal = [ty in (0, 1) for ty in types]
    merges = []
    for i in sorted((i for i in range(len(tokens)) if normal[i]), key=lambda i: -scores[i]):
        t = tokens[i]
        local = []
        for k in range(1, len(t)):
            a, b = t[:k], t[k:]
            if a in vocab and b in vocab and normal[vocab[a]] and normal[vocab[b]]:
                local.append((vocab[a], vocab[b], a, b))
        merges += [(a, b) for _, _, a, b in sorted(local)]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token=unk, fuse_unk=True, byte_fallback=True))
    steps = [normalizers.Replace(" ", "\u2581")]
    decs = [decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()]
    if prefix:
        steps.insert(0, normalizers.Prepend("\u2581"))
        decs.append(decoders.Strip(" ", 1, 0))
    tok.normalizer = normalizers.Sequence(steps)
    tok.decoder = decoders.Sequence(decs)
    tok.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False) for i in range(len(tokens)) if types[i] == 3])
    tok.add_tokens([AddedToken(tokens[i], special=False, normalized=False) for i in range(len(tokens)) if types[i] == 4])
    got = Tokenizer.from_file(got_path)
    with open(text_path, encoding="utf-8") as f:
        texts = [f.read()] + STRESS
    out = {"texts": texts, "ids": [], "decoded": []}
    for t in texts:
        want, have = tok.encode(t, add_special_tokens=False).ids, got.encode(t, add_special_tokens=False).ids
        if want != have:
            i = next((i for i in range(min(len(want), len(have))) if want[i] != have[i]), min(len(want), len(have)))
            sys.exit("the library's ids of %r with the GGUF import's tokenizer.json differ at %d: %r, want %r"
                     % (t[:40], i, have[i:i + 5], want[i:i + 5]))
        out["ids"].append(want)
        out["decoded"].append(tok.decode(want, skip_special_tokens=False))
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
