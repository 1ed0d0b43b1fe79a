"""Compares two tokenizer.json files with the `tokenizers` library, for the
Go tests of the tokenizer that hf's GGUF import makes:

  tokenizer_compare.py GOT.json WANT.json TEXT

Checks that the files have the same vocabulary, merges, added tokens (id,
content, special), normalizer and pre_tokenizer, and that the library gives
the same ids for TEXT and for stress texts (whitespace runs, tabs, \\r\\n,
digits, code, CJK, emoji, special tokens written in text). Prints the number
of ids compared; exits non-zero naming the first difference.
"""

import json
import sys

from tokenizers import Tokenizer

STRESS = [
    "", " ", "\n\nFirst Citizen:\nBefore we proceed", "{\n\tx = 1;\r\n}\r\n", "trailing   ",
    "  leading and   inner   runs  ", "12345678901 3.14159 1,000,000", "def f(x):\n    return x**2  # square\n",
    "日本語のテキスト、中文字符", "emoji 😀👍🏽 and ZWJ 👨‍👩‍👧", "don't I'LL we've", "a\u00a0b\u2003c",
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|>text<|endoftext|>",
]


def merges(m):
    return [" ".join(x) if isinstance(x, list) else x for x in m]


def main():
    got_path, want_path, text_path = sys.argv[1:4]
    got, want = (json.load(open(p, encoding="utf-8")) for p in (got_path, want_path))
    for key in ("normalizer", "pre_tokenizer"):
        if got.get(key) != want.get(key):
            sys.exit("%s differs: %r, want %r" % (key, got.get(key), want.get(key)))
    if got["model"]["vocab"] != want["model"]["vocab"]:
        sys.exit("vocab differs")
    if merges(got["model"]["merges"]) != merges(want["model"]["merges"]):
        sys.exit("merges differ")
    added = lambda f: sorted((a["id"], a["content"], a["special"]) for a in f["added_tokens"])
    if added(got) != added(want):
        sys.exit("added tokens differ: %r, want %r" % (added(got)[:5], added(want)[:5]))
    tg, tw = Tokenizer.from_file(got_path), Tokenizer.from_file(want_path)
    with open(text_path, encoding="utf-8") as f:
        texts = [f.read()] + STRESS
    n = 0
    for t in texts:
        a, b = tg.encode(t).ids, tw.encode(t).ids
        if a != b:
            i = next((i for i in range(min(len(a), len(b))) if a[i] != b[i]), min(len(a), len(b)))
            sys.exit("ids of %r differ at %d: %r, want %r" % (t[:40], i, a[i : i + 5], b[i : i + 5]))
        n += len(a)
    print(n)


if __name__ == "__main__":
    main()
