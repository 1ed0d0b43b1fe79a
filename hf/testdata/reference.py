"""Independent numpy reference for Hugging Face GPT-2 and Llama folders.

Written from the architectures (GPT-2: "Language Models are Unsupervised
Multitask Learners" and Hugging Face's GPT2LMHeadModel layout; Llama: RMSNorm,
rotary embeddings in the rotate-half convention, SwiGLU, grouped-query
attention, as Hugging Face's LlamaForCausalLM lays it out), not from
posttrainllm's code. The Go tests in hf/ call it:

  reference.py make DIR --family gpt2|llama --dtype float32|float16|bfloat16
                        [--shards N] [--seed S] [--rope-scaling F] [--tied]
                        [--vocab V]
      writes a random-weight Hugging Face folder: config.json and
      model.safetensors, or N shards with model.safetensors.index.json
  reference.py logits DIR OUT TOKENS...
      runs the model of DIR on TOKENS (one sequence) in float64 and writes
      the [T, vocab] logits to OUT as little-endian float32
"""

import argparse
import json
import os
import struct
import sys

import numpy as np
from safetensors.numpy import load_file, save_file

# ---------------------------------------------------------------- files


def to_bf16_bits(a):
    """Rounds float32 values to bfloat16 (nearest even) and returns the bits."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16)


def save_bf16(tensors, path):
    """Writes tensors as BF16 safetensors by hand: numpy has no bfloat16."""
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name in sorted(tensors):
        b = to_bf16_bits(tensors[name]).tobytes()
        header[name] = {"dtype": "BF16", "shape": list(tensors[name].shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def read_safetensors(path):
    """Reads every tensor of a safetensors file as float64, BF16 included."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    if all(v["dtype"] != "BF16" for k, v in header.items() if k != "__metadata__"):
        return {k: v.astype(np.float64) for k, v in load_file(path).items()}
    out, base = {}, 8 + n
    kinds = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16}
    for k, v in header.items():
        if k == "__metadata__":
            continue
        s, e = v["data_offsets"]
        a = np.frombuffer(raw[base + s : base + e], dtype=kinds[v["dtype"]]).reshape(v["shape"])
        if v["dtype"] == "BF16":
            a = (a.astype(np.uint32) << 16).view(np.float32)
        out[k] = a.astype(np.float64)
    return out


def read_folder(d):
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    index = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    w = {}
    for name in files:
        w.update(read_safetensors(os.path.join(d, name)))
    return cfg, w


def write_folder(d, cfg, tensors, dtype, shards):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)

    def save(ts, path):
        if dtype == "bfloat16":
            save_bf16(ts, path)
        else:
            np_dtype = np.float16 if dtype == "float16" else np.float32
            save_file({k: v.astype(np_dtype) for k, v in ts.items()}, path, metadata={"format": "pt"})

    if shards <= 1:
        save(tensors, os.path.join(d, "model.safetensors"))
        return
    names = sorted(tensors)
    weight_map = {}
    for i in range(shards):
        file = "model-%05d-of-%05d.safetensors" % (i + 1, shards)
        part = {n: tensors[n] for n in names[i::shards]}
        save(part, os.path.join(d, file))
        weight_map.update({n: file for n in part})
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, f, indent=2)


# ---------------------------------------------------------------- random models


def make_gpt2(rng, tied, vocab):
    D, L, H, V, P = 48, 2, 4, vocab or 97, 32
    cfg = {
        "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": V, "n_positions": P,
        "n_ctx": P, "n_embd": D, "n_layer": L, "n_head": H, "n_inner": None,
        "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True,
    }
    r = lambda *s: (rng.standard_normal(s) * 0.2).astype(np.float32)
    one = lambda n: (1 + rng.standard_normal(n) * 0.2).astype(np.float32)
    t = {"transformer.wte.weight": r(V, D), "transformer.wpe.weight": r(P, D),
         "transformer.ln_f.weight": one(D), "transformer.ln_f.bias": r(D)}
    for i in range(L):
        p = "transformer.h.%d." % i
        t.update({
            p + "ln_1.weight": one(D), p + "ln_1.bias": r(D),
            p + "attn.c_attn.weight": r(D, 3 * D), p + "attn.c_attn.bias": r(3 * D),
            p + "attn.c_proj.weight": r(D, D), p + "attn.c_proj.bias": r(D),
            p + "ln_2.weight": one(D), p + "ln_2.bias": r(D),
            p + "mlp.c_fc.weight": r(D, 4 * D), p + "mlp.c_fc.bias": r(4 * D),
            p + "mlp.c_proj.weight": r(4 * D, D), p + "mlp.c_proj.bias": r(D),
        })
    return cfg, t


def make_llama(rng, tied, rope_scaling, vocab):
    D, L, H, KV, F, V, P = 64, 2, 4, 2, 96, vocab or 101, 64
    cfg = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": V, "hidden_size": D,
        "intermediate_size": F, "num_hidden_layers": L, "num_attention_heads": H, "num_key_value_heads": KV,
        "max_position_embeddings": P, "rms_norm_eps": 1e-6, "rope_theta": 500000.0, "hidden_act": "silu",
        "tie_word_embeddings": tied, "attention_bias": False, "mlp_bias": False,
        "rope_scaling": {"rope_type": "linear", "factor": rope_scaling} if rope_scaling else None,
    }
    hd = D // H
    r = lambda *s: (rng.standard_normal(s) * 0.2).astype(np.float32)
    one = lambda n: (1 + rng.standard_normal(n) * 0.2).astype(np.float32)
    t = {"model.embed_tokens.weight": r(V, D), "model.norm.weight": one(D)}
    if not tied:
        t["lm_head.weight"] = r(V, D)
    for i in range(L):
        p = "model.layers.%d." % i
        t.update({
            p + "input_layernorm.weight": one(D), p + "post_attention_layernorm.weight": one(D),
            p + "self_attn.q_proj.weight": r(H * hd, D), p + "self_attn.k_proj.weight": r(KV * hd, D),
            p + "self_attn.v_proj.weight": r(KV * hd, D), p + "self_attn.o_proj.weight": r(D, H * hd),
            p + "mlp.gate_proj.weight": r(F, D), p + "mlp.up_proj.weight": r(F, D),
            p + "mlp.down_proj.weight": r(D, F),
        })
    return cfg, t


# ---------------------------------------------------------------- forward passes


def softmax(x):
    x = x - x.max(-1, keepdims=True)
    e = np.exp(x)
    return e / e.sum(-1, keepdims=True)


def attend(q, k, v):
    """Causal attention of q [H, T, hd] over k, v [H, T, hd]."""
    T, hd = q.shape[1], q.shape[2]
    s = q @ k.transpose(0, 2, 1) / np.sqrt(hd)
    s = np.where(np.tril(np.ones((T, T), dtype=bool)), s, -np.inf)
    return softmax(s) @ v


def gpt2_logits(cfg, w, tokens):
    pre = "transformer." if "transformer.wte.weight" in w else ""
    D, H, eps = cfg["n_embd"], cfg["n_head"], cfg["layer_norm_epsilon"]
    T, hd = len(tokens), D // H

    def ln(x, name):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + eps) * w[name + ".weight"] + w[name + ".bias"]

    def conv1d(x, name):  # GPT-2 stores Conv1D weights [in, out]
        return x @ w[name + ".weight"] + w[name + ".bias"]

    def gelu(x):
        if cfg.get("activation_function", "gelu_new") in ("gelu_new", "gelu_pytorch_tanh"):
            return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))
        from math import erf
        return 0.5 * x * (1 + np.vectorize(erf)(x / np.sqrt(2)))

    x = w[pre + "wte.weight"][tokens] + w[pre + "wpe.weight"][:T]
    for i in range(cfg["n_layer"]):
        p = pre + "h.%d." % i
        qkv = conv1d(ln(x, p + "ln_1"), p + "attn.c_attn")
        q, k, v = (a.reshape(T, H, hd).transpose(1, 0, 2) for a in np.split(qkv, 3, axis=-1))
        y = attend(q, k, v).transpose(1, 0, 2).reshape(T, D)
        x = x + conv1d(y, p + "attn.c_proj")
        x = x + conv1d(gelu(conv1d(ln(x, p + "ln_2"), p + "mlp.c_fc")), p + "mlp.c_proj")
    x = ln(x, pre + "ln_f")
    return x @ w[pre + "wte.weight"].T


def llama_logits(cfg, w, tokens):
    D, H = cfg["hidden_size"], cfg["num_attention_heads"]
    KV = cfg.get("num_key_value_heads") or H
    T, hd, eps = len(tokens), D // H, cfg["rms_norm_eps"]
    theta = cfg.get("rope_theta", 10000.0)
    factor = (cfg.get("rope_scaling") or {}).get("factor", 1.0)

    def rms(x, name):
        return x / np.sqrt((x**2).mean(-1, keepdims=True) + eps) * w[name + ".weight"]

    def lin(x, name):  # torch Linear stores [out, in]
        return x @ w[name + ".weight"].T

    inv_freq = 1.0 / theta ** (np.arange(0, hd, 2) / hd)
    freqs = np.outer(np.arange(T) / factor, inv_freq)  # [T, hd/2]
    emb = np.concatenate([freqs, freqs], -1)
    cos, sin = np.cos(emb), np.sin(emb)

    def rope(x):  # x [h, T, hd]; rotate-half convention
        x1, x2 = x[..., : hd // 2], x[..., hd // 2 :]
        return x * cos + np.concatenate([-x2, x1], -1) * sin

    silu = lambda x: x / (1 + np.exp(-x))
    x = w["model.embed_tokens.weight"][tokens]
    for i in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % i
        a = rms(x, p + "input_layernorm")
        q = rope(lin(a, p + "self_attn.q_proj").reshape(T, H, hd).transpose(1, 0, 2))
        k = rope(lin(a, p + "self_attn.k_proj").reshape(T, KV, hd).transpose(1, 0, 2))
        v = lin(a, p + "self_attn.v_proj").reshape(T, KV, hd).transpose(1, 0, 2)
        k, v = np.repeat(k, H // KV, axis=0), np.repeat(v, H // KV, axis=0)
        y = attend(q, k, v).transpose(1, 0, 2).reshape(T, D)
        x = x + lin(y, p + "self_attn.o_proj")
        a = rms(x, p + "post_attention_layernorm")
        x = x + lin(silu(lin(a, p + "mlp.gate_proj")) * lin(a, p + "mlp.up_proj"), p + "mlp.down_proj")
    x = rms(x, "model.norm")
    head = w["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else w["lm_head.weight"]
    return x @ head.T


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    mk = sub.add_parser("make")
    mk.add_argument("dir")
    mk.add_argument("--family", choices=["gpt2", "llama"], required=True)
    mk.add_argument("--dtype", choices=["float32", "float16", "bfloat16"], default="float32")
    mk.add_argument("--shards", type=int, default=1)
    mk.add_argument("--seed", type=int, default=0)
    mk.add_argument("--rope-scaling", type=float, default=0)
    mk.add_argument("--tied", action="store_true")
    mk.add_argument("--vocab", type=int, default=0)
    lg = sub.add_parser("logits")
    lg.add_argument("dir")
    lg.add_argument("out")
    lg.add_argument("tokens", type=int, nargs="+")
    a = ap.parse_args()
    if a.cmd == "make":
        rng = np.random.default_rng(a.seed)
        if a.family == "gpt2":
            cfg, t = make_gpt2(rng, a.tied, a.vocab)
        else:
            cfg, t = make_llama(rng, a.tied, a.rope_scaling, a.vocab)
        cfg["torch_dtype"] = a.dtype
        write_folder(a.dir, cfg, t, a.dtype, a.shards)
        return
    cfg, w = read_folder(a.dir)
    fwd = {"gpt2": gpt2_logits, "llama": llama_logits}[cfg["model_type"]]
    fwd(cfg, w, np.array(a.tokens)).astype("<f4").tofile(a.out)


if __name__ == "__main__":
    sys.exit(main())
