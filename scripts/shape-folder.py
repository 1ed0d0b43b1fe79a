#!/usr/bin/env python3
"""Writes a Hugging Face folder in the shape of a published model, with
random weights, for memory and speed measurements (they do not depend on
the weights' values): config.json, model.safetensors (bfloat16) and the
tokenizer files of another folder (its ids fit the larger vocabulary).

    scripts/shape-folder.py qwen2.5-0.5b TOKENIZER_FOLDER OUT
    scripts/shape-folder.py smollm2-135m TOKENIZER_FOLDER OUT

Needs numpy only.
"""
import json
import os
import shutil
import struct
import sys

import numpy as np

# config.json of Qwen/Qwen2.5-0.5B-Instruct, the fields the import reads.
SHAPES = {
    "qwen2.5-0.5b": {
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
        "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
        "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936,
        "max_position_embeddings": 32768, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
        "tie_word_embeddings": True, "hidden_act": "silu", "torch_dtype": "bfloat16",
    },
    # config.json of HuggingFaceTB/SmolLM2-135M-Instruct, the fields the import reads.
    "smollm2-135m": {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30,
        "num_attention_heads": 9, "num_key_value_heads": 3, "vocab_size": 49152,
        "max_position_embeddings": 8192, "rope_theta": 100000.0, "rms_norm_eps": 1e-5,
        "tie_word_embeddings": True, "hidden_act": "silu", "torch_dtype": "bfloat16",
        "bos_token_id": 1, "eos_token_id": 2,
    },
}


def tensors(c):
    """(name, shape, is_norm) of a Qwen2/Llama-style decoder."""
    d, f, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    hd = d // c["num_attention_heads"]
    kv = c["num_key_value_heads"] * hd
    yield "model.embed_tokens.weight", (v, d), False
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        yield p + "input_layernorm.weight", (d,), True
        yield p + "post_attention_layernorm.weight", (d,), True
        for n, shape in (("q_proj", (d, d)), ("k_proj", (kv, d)), ("v_proj", (kv, d)), ("o_proj", (d, d))):
            yield p + "self_attn." + n + ".weight", shape, False
            if n != "o_proj" and c["model_type"] == "qwen2":
                yield p + "self_attn." + n + ".bias", shape[:1], False
        for n, shape in (("gate_proj", (f, d)), ("up_proj", (f, d)), ("down_proj", (d, f))):
            yield p + "mlp." + n + ".weight", shape, False
    yield "model.norm.weight", (d,), True
    if not c["tie_word_embeddings"]:
        yield "lm_head.weight", (v, d), False


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in SHAPES:
        sys.exit(f"usage: {sys.argv[0]} {{{','.join(SHAPES)}}} TOKENIZER_FOLDER OUT")
    c, tok, out = SHAPES[sys.argv[1]], sys.argv[2], sys.argv[3]
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(0)
    header, blobs, offset = {}, [], 0
    for name, shape, norm in tensors(c):
        if norm:
            a = np.ones(shape, np.float32)
        else:
            a = rng.standard_normal(shape, dtype=np.float32) * np.float32(0.02)
        bits = (a.view(np.uint32) >> 16).astype(np.uint16)  # bfloat16, truncated
        b = bits.tobytes()
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(os.path.join(out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(c, f, indent=2)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        if os.path.exists(os.path.join(tok, name)):
            shutil.copy(os.path.join(tok, name), out)
    print(f"{out}: {sys.argv[1]} shape, {offset / 1e9:.2f} GB of bfloat16 weights")


if __name__ == "__main__":
    main()
