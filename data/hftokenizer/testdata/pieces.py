"""Pre-tokenizes a text with Hugging Face's tokenizers, for
data/hftokenizer/pieces_test.go.

  pieces.py TEXT OUT.json

writes, for each pre-tokenizer below, the pieces it cuts TEXT into: Llama
3's and Qwen2's Split patterns, ByteLevel with GPT-2's built-in pattern,
and Digits.
"""

import json
import sys

from tokenizers import Regex, pre_tokenizers

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from stress import LLAMA3, QWEN2  # noqa: E402


def main():
    text_path, out = sys.argv[1:3]
    text = open(text_path, encoding="utf-8", newline="").read()
    pts = {
        "llama3": pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated", invert=False),
        "qwen2": pre_tokenizers.Split(Regex(QWEN2), behavior="isolated", invert=False),
        "bytelevel": pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        "digits": pre_tokenizers.Digits(individual_digits=False),
    }
    with open(out, "w", encoding="utf-8") as f:
        json.dump({name: [p for p, _ in pt.pre_tokenize_str(text)] for name, pt in pts.items()}, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
