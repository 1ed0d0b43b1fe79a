"""Builds tokenizer.json variants of the shapes published models ship and
encodes samples with Hugging Face's tokenizers, for
data/hftokenizer/stress_test.go.

  stress.py SMOLLM2.json TEXT SAMPLES.json OUT

For each variant writes OUT/NAME/tokenizer.json and OUT/NAME/expected.json:
the ids of every sample with special tokens matched (tokenizers' default)
and encoded as text (encode_special_tokens), no special tokens added, and
the text each decodes to; and the text of every id alone and of random id
sequences, which cut characters' bytes apart. Variants:

  smollm2   the real SmolLM2 file as given (Digits + ByteLevel)
  llama3    SmolLM2's vocabulary and merges with Llama 3's pre-tokenizer
            (Split with its regex, ByteLevel without regex), ignore_merges,
            and added tokens with lstrip/rstrip, single_word, normalized
  qwen2     SmolLM2's vocabulary and merges with Qwen2's NFC normalizer and
            pre-tokenizer
  llama2    BPE with byte fallback trained on TEXT, Llama 2's shape
            (Prepend and Replace normalizers, Replace/ByteFallback/Fuse/Strip)
  metaspace the same trained as Mistral's later files: Metaspace
            pre-tokenizer and decoder with prepend_scheme "first"
  unigram   a Unigram model (SentencePiece's unigram language model)
            trained on TEXT with byte fallback, a Metaspace pre-tokenizer
            and ByteFallback and Metaspace decoders

OUT/smollm2/text.ids gets the ids of the whole of TEXT (int32, little
endian), without special tokens matched or added.
"""

import copy
import json
import os
import random
import sys

import numpy as np
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

LLAMA3 = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
QWEN2 = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"


def split_bytelevel(regex, trim_offsets):
    return {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": trim_offsets, "use_regex": False}]}


def added(id, content, special, lstrip=False, rstrip=False, single_word=False, normalized=False):
    return {"id": id, "content": content, "single_word": single_word, "lstrip": lstrip,
            "rstrip": rstrip, "normalized": normalized, "special": special}


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


def trained_sp(text, metaspace):
    tok = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>", fuse_unk=True))
    if metaspace:
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=False)
        tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="first", split=False)
    else:
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
        tok.decoder = decoders.Sequence([
            decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    specials = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)]
    lines = text[:100_000].splitlines(keepends=True)
    tok.train_from_iterator(lines, trainers.BpeTrainer(vocab_size=900, special_tokens=specials))
    return json.loads(tok.to_str())


def trained_unigram(text):
    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=True)
    tok.decoder = decoders.Sequence([
        decoders.ByteFallback(), decoders.Metaspace(replacement="\u2581", prepend_scheme="first", split=True)])
    specials = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)]
    lines = text[:100_000].splitlines(keepends=True)
    tok.train_from_iterator(lines, trainers.UnigramTrainer(vocab_size=900, special_tokens=specials, unk_token="<unk>"))
    spec = json.loads(tok.to_str())
    spec["model"]["byte_fallback"] = True
    return spec


def main():
    smol_path, text_path, samples_path, out = sys.argv[1:5]
    text = open(text_path, encoding="utf-8", newline="").read()
    samples = json.load(open(samples_path, encoding="utf-8"))
    smol = json.load(open(smol_path, encoding="utf-8"))

    llama3 = copy.deepcopy(smol)
    llama3["pre_tokenizer"] = split_bytelevel(LLAMA3, True)
    llama3["model"]["ignore_merges"] = True
    n = len(llama3["model"]["vocab"])
    llama3["added_tokens"] += [
        added(n, "<|begin_of_text|>", True), added(n + 1, "<|eot_id|>", True),
        added(n + 2, "<mask>", True, lstrip=True, rstrip=True),
        added(n + 3, "[NS]", False, normalized=True),
        added(n + 4, "wordtok", False, single_word=True),
        added(n + 5, "<|im_start|>x", True)]

    qwen2 = copy.deepcopy(smol)
    qwen2["normalizer"] = {"type": "NFC"}
    qwen2["pre_tokenizer"] = split_bytelevel(QWEN2, False)

    variants = {"smollm2": smol, "llama3": llama3, "qwen2": qwen2,
                "llama2": trained_sp(text, False), "metaspace": trained_sp(text, True),
                "unigram": trained_unigram(text)}
    for name, spec in variants.items():
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, "tokenizer.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(spec, f, ensure_ascii=False)
        tok = Tokenizer.from_file(path)
        special = [tok.encode(s, add_special_tokens=False).ids for s in samples]
        tok.encode_special_tokens = True
        plain = [tok.encode(s, add_special_tokens=False).ids for s in samples]
        vocab = tok.get_vocab_size()
        rng = random.Random(0)
        seqs = [[rng.randrange(vocab) for _ in range(rng.randint(1, 6))] for _ in range(500)]
        if name == "smollm2":
            # Byte tokens that cut or break UTF-8 sequences, for the
            # replacement of invalid bytes.
            b2u = bytes_to_unicode()
            for bad in ["e282", "e28241", "f09f98", "f09f9841e282ac", "eda080", "f4908080",
                        "e08080", "80bf", "c3", "c3a9c3", "e2e282ac"]:
                ids = [tok.token_to_id(b2u[b]) for b in bytes.fromhex(bad)]
                assert None not in ids, bad
                seqs.append(ids)
        with open(os.path.join(d, "expected.json"), "w") as f:
            json.dump({
                "singles_decoded": tok.decode_batch([[i] for i in range(vocab)], skip_special_tokens=False),
                "seqs": seqs, "seqs_decoded": tok.decode_batch(seqs, skip_special_tokens=False),
                "special": special, "plain": plain,
                "special_decoded": [tok.decode(i, skip_special_tokens=False) for i in special],
                "plain_decoded": [tok.decode(i, skip_special_tokens=False) for i in plain],
            }, f)
        if name == "smollm2":
            ids = tok.encode(text, add_special_tokens=False).ids
            np.asarray(ids, dtype="<i4").tofile(os.path.join(d, "text.ids"))


if __name__ == "__main__":
    main()
