"""Converts a llama.cpp GGUF file of a Llama-architecture model into a Hugging
Face folder, independently of posttrainllm's code: the reference the Go tests
compare posttrainllm's own GGUF import and tokenizer with.

  gguf_to_hf.py FILE.gguf OUTDIR

Written from the GGUF specification and Hugging Face's LlamaForCausalLM and
tokenizer.json layouts, with the `gguf` package (llama.cpp's own Python
reader) for parsing and dequantization. OUTDIR gets:

- config.json (LlamaForCausalLM) and generation_config.json;
- model.safetensors: every tensor dequantized to float32 under Hugging Face's
  names, with llama.cpp's q/k row permutation undone (convert_hf_to_gguf.py
  interleaves the two rotary halves of each head's rows; Hugging Face keeps
  them as halves);
- tokenizer.json: byte-level BPE from tokenizer.ggml.tokens and merges, the
  CONTROL tokens as special added tokens, the pre-tokenizer the GGUF names;
- tokenizer_config.json: the chat template and the bos/eos/unk tokens.
"""

import json
import os
import sys

import numpy as np
from gguf import GGUFReader, GGUFValueType
from gguf.quants import dequantize
from safetensors.numpy import save_file

# tokenizer.ggml.pre names → tokenizer.json pre_tokenizer. "smollm" is the
# StarCoder-style split SmolLM/SmolLM2 ship: digits one by one, then GPT-2's
# byte-level split.
PRE_TOKENIZERS = {
    "smollm": {
        "type": "Sequence",
        "pretokenizers": [
            {"type": "Digits", "individual_digits": True},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        ],
    },
    "gpt-2": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
}

CONTROL = 3  # llama.cpp's token type of special (control) tokens


def field(reader, key, default=None):
    """Returns a metadata value as Python data: str, number or list."""
    f = reader.fields.get(key)
    if f is None:
        return default
    t = f.types[0]
    if t == GGUFValueType.STRING:
        return bytes(f.parts[f.data[0]]).decode("utf-8")
    if t == GGUFValueType.ARRAY:
        if f.types[1] == GGUFValueType.STRING:
            return [bytes(f.parts[i]).decode("utf-8") for i in f.data]
        return [f.parts[i][0].item() for i in f.data]
    return f.parts[f.data[0]][0].item()


def unpermute(w, heads):
    """Undoes convert_hf_to_gguf.py's permute of q/k rows for `heads` heads."""
    rows = w.shape[0]
    return w.reshape(heads, rows // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def hf_name(name):
    """Maps a llama.cpp tensor name to Hugging Face's LlamaForCausalLM name."""
    top = {
        "token_embd.weight": "model.embed_tokens.weight",
        "output_norm.weight": "model.norm.weight",
        "output.weight": "lm_head.weight",
    }
    if name in top:
        return top[name]
    _, layer, rest = name.split(".", 2)
    per_layer = {
        "attn_norm.weight": "input_layernorm.weight",
        "ffn_norm.weight": "post_attention_layernorm.weight",
        "attn_q.weight": "self_attn.q_proj.weight",
        "attn_k.weight": "self_attn.k_proj.weight",
        "attn_v.weight": "self_attn.v_proj.weight",
        "attn_output.weight": "self_attn.o_proj.weight",
        "ffn_gate.weight": "mlp.gate_proj.weight",
        "ffn_up.weight": "mlp.up_proj.weight",
        "ffn_down.weight": "mlp.down_proj.weight",
    }
    return f"model.layers.{layer}.{per_layer[rest]}"


def tensors(reader, heads, kv_heads):
    """Every tensor, dequantized to float32 [rows, cols], under HF names."""
    out = {}
    for t in reader.tensors:
        w = dequantize(t.data, t.tensor_type).astype(np.float32)
        w = w.reshape([int(d) for d in reversed(t.shape)])
        if t.name.endswith("attn_q.weight"):
            w = unpermute(w, heads)
        elif t.name.endswith("attn_k.weight"):
            w = unpermute(w, kv_heads)
        out[hf_name(t.name)] = np.ascontiguousarray(w)
    return out


def tokenizer_json(reader):
    """The tokenizer.json of the GGUF's byte-level BPE vocabulary."""
    if field(reader, "tokenizer.ggml.model") != "gpt2":
        sys.exit("only byte-level BPE (tokenizer.ggml.model = gpt2) is converted")
    pre = field(reader, "tokenizer.ggml.pre")
    if pre not in PRE_TOKENIZERS:
        sys.exit(f"pre-tokenizer {pre!r} is not converted: want one of {sorted(PRE_TOKENIZERS)}")
    tokens = field(reader, "tokenizer.ggml.tokens")
    types = field(reader, "tokenizer.ggml.token_type")
    merges = field(reader, "tokenizer.ggml.merges")
    unk = field(reader, "tokenizer.ggml.unknown_token_id")
    added = [
        {"id": i, "content": tok, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True}
        for i, (tok, ty) in enumerate(zip(tokens, types))
        if ty == CONTROL
    ]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": PRE_TOKENIZERS[pre],
        "post_processor": dict(byte_level, trim_offsets=False),
        "decoder": byte_level,
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": tokens[unk] if unk is not None else None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": {tok: i for i, tok in enumerate(tokens)},
            "merges": merges,
        },
    }


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    src, out = sys.argv[1], sys.argv[2]
    r = GGUFReader(src)
    arch = field(r, "general.architecture")
    if arch != "llama":
        sys.exit(f"architecture {arch!r} is not converted: want llama")
    heads = field(r, "llama.attention.head_count")
    kv_heads = field(r, "llama.attention.head_count_kv", heads)
    tokens = field(r, "tokenizer.ggml.tokens")
    weights = tensors(r, heads, kv_heads)
    bos, eos = field(r, "tokenizer.ggml.bos_token_id"), field(r, "tokenizer.ggml.eos_token_id")
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": field(r, "llama.embedding_length"),
        "intermediate_size": field(r, "llama.feed_forward_length"),
        "num_hidden_layers": field(r, "llama.block_count"),
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "hidden_act": "silu",
        "max_position_embeddings": field(r, "llama.context_length"),
        "rms_norm_eps": float(f"{field(r, 'llama.attention.layer_norm_rms_epsilon'):.7g}"),
        "rope_theta": float(field(r, "llama.rope.freq_base", 10000.0)),
        "rope_scaling": None,
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": "lm_head.weight" not in weights,
        "vocab_size": len(tokens),
        "bos_token_id": bos,
        "eos_token_id": eos,
        "torch_dtype": "float32",
    }
    tok_config = {
        "add_prefix_space": False,
        "bos_token": tokens[bos],
        "eos_token": tokens[eos],
        "unk_token": tokens[field(r, "tokenizer.ggml.unknown_token_id")],
        "pad_token": tokens[field(r, "tokenizer.ggml.padding_token_id", eos)],
        "clean_up_tokenization_spaces": False,
        "model_max_length": config["max_position_embeddings"],
        "tokenizer_class": "GPT2Tokenizer",
        "chat_template": field(r, "tokenizer.chat_template"),
    }
    os.makedirs(out, exist_ok=True)
    save_file(weights, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    files = {
        "config.json": config,
        "generation_config.json": {"bos_token_id": bos, "eos_token_id": eos},
        "tokenizer.json": tokenizer_json(r),
        "tokenizer_config.json": tok_config,
    }
    for name, obj in files.items():
        with open(os.path.join(out, name), "w", encoding="utf-8") as f:
            json.dump(obj, f, ensure_ascii=False, indent=1)


if __name__ == "__main__":
    main()
