"""Trains two small tokenizers with Hugging Face's tokenizers and encodes
samples with them, for data/hftokenizer/tokenizer_test.go.

  hftokenizers.py TEXT OUT SAMPLES.json

writes OUT/bytelevel/tokenizer.json (byte-level BPE, as GPT-2, Llama 3 and SmolLM)
and OUT/sp/tokenizer.json with tokenizer_config.json (SentencePiece-style
BPE with byte fallback, as Llama 2 and Mistral), both trained on TEXT, and
OUT/expected.json: for each tokenizer the ids of every sample (no special
tokens added), the text those ids decode to, and the EOS id.
"""

import json
import os
import sys

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers


def main():
    text_path, out, samples_path = sys.argv[1:4]
    text = open(text_path, encoding="utf-8").read()
    samples = json.load(open(samples_path, encoding="utf-8"))

    bl = Tokenizer(models.BPE())
    bl.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bl.decoder = decoders.ByteLevel()
    lines = text.splitlines(keepends=True)
    bl.train_from_iterator(lines, trainers.BpeTrainer(
        vocab_size=800, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))

    sp = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>", fuse_unk=True))
    sp.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    sp.decoder = decoders.Sequence([
        decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    specials = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)]
    sp.train_from_iterator(lines, trainers.BpeTrainer(vocab_size=900, special_tokens=specials))

    expected = {}
    for name, tok, eos in [("bytelevel", bl, "<|endoftext|>"), ("sp", sp, "</s>")]:
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        tok.save(os.path.join(d, "tokenizer.json"))
        if name == "sp":
            with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
                json.dump({"bos_token": "<s>", "eos_token": {"content": eos}, "unk_token": "<unk>"}, f)
        ids = [tok.encode(s, add_special_tokens=False).ids for s in samples]
        expected[name] = {
            "ids": ids,
            "decoded": [tok.decode(i, skip_special_tokens=False) for i in ids],
            "eos": tok.token_to_id(eos),
            "vocab": tok.get_vocab_size(),
        }
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump(expected, f)


if __name__ == "__main__":
    main()
