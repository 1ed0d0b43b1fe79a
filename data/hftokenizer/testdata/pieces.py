"""Pre-tokenizes a text with Hugging Face's tokenizers, for
data/hftokenizer/pieces_test.go.

  pieces.py TEXT CONFIGS.json OUT.json

CONFIGS maps names to pre_tokenizer objects of tokenizer.json; OUT gets,
for each name, the pieces that pre-tokenizer cuts TEXT into.
"""

import json
import sys

from tokenizers import Tokenizer


def main():
    text_path, configs_path, out = sys.argv[1:4]
    text = open(text_path, encoding="utf-8", newline="").read()
    configs = json.load(open(configs_path, encoding="utf-8"))
    result = {}
    for name, cfg in configs.items():
        tok = Tokenizer.from_str(json.dumps({
            "version": "1.0", "added_tokens": [], "normalizer": None, "pre_tokenizer": cfg,
            "post_processor": None, "decoder": None, "model": {"type": "BPE", "vocab": {}, "merges": []}}))
        result[name] = [p for p, _ in tok.pre_tokenizer.pre_tokenize_str(text)]
    with open(out, "w", encoding="utf-8") as f:
        json.dump(result, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
