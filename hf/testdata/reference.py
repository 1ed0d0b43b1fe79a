"""Independent numpy reference for Hugging Face GPT-2 and Llama-shaped folders.

Written from the architectures (GPT-2: "Language Models are Unsupervised
Multitask Learners" and Hugging Face's GPT2LMHeadModel layout; Llama: RMSNorm,
rotary embeddings in the rotate-half convention, SwiGLU, grouped-query
attention, as Hugging Face's LlamaForCausalLM lays it out; Llama 3.1's
frequency scaling as Meta's reference code writes it; Mistral, Qwen2 (q/k/v
biases), Qwen3 (per-head q/k RMSNorm, its own head_dim) and Phi-3 (fused
qkv_proj and gate_up_proj) as their Hugging Face classes lay them out), not
from posttrainllm's code. The Go tests in hf/ call it:

  reference.py make DIR --family gpt2|llama|llama3|mistral|qwen2|qwen3|phi3
                        --dtype float32|float16|bfloat16 [--shards N]
                        [--seed S] [--rope-scaling F] [--tied] [--vocab V]
                        [--attention-bias]
      writes a random-weight Hugging Face folder (config.json in the shape
      of a real checkpoint of the family, and model.safetensors, or N
      shards with model.safetensors.index.json)
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


def make_family(rng, family, tied, attention_bias, vocab):
    """A small random model of a Llama-shaped family, its config.json keyed as
    the family's published checkpoints are (Llama 3.2, Mistral v0.3,
    Qwen2.5, Qwen3, Phi-3-mini)."""
    D, L, H, KV, F, V, P = 64, 2, 4, 2, 96, vocab or 101, 128
    common = {
        "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu", "hidden_size": D,
        "initializer_range": 0.02, "intermediate_size": F, "max_position_embeddings": P, "num_attention_heads": H,
        "num_hidden_layers": L, "num_key_value_heads": KV, "tie_word_embeddings": tied, "transformers_version": "4.51.0",
        "use_cache": True, "vocab_size": V,
    }
    hd = D // H
    if family == "llama3":
        hd = 24  # head_dim given, not hidden_size / num_attention_heads
        cfg = dict(common, architectures=["LlamaForCausalLM"], model_type="llama", attention_bias=attention_bias,
                   head_dim=hd, mlp_bias=False, pretraining_tp=1, rms_norm_eps=1e-5, rope_theta=500000.0,
                   rope_scaling={"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                                 "original_max_position_embeddings": 32, "rope_type": "llama3"})
    elif family == "mistral":
        cfg = dict(common, architectures=["MistralForCausalLM"], model_type="mistral", rms_norm_eps=1e-5,
                   rope_theta=1000000.0, sliding_window=None)
    elif family == "qwen2":
        cfg = dict(common, architectures=["Qwen2ForCausalLM"], model_type="qwen2", max_window_layers=L,
                   rms_norm_eps=1e-6, rope_theta=1000000.0, sliding_window=P, use_sliding_window=False)
    elif family == "qwen3":
        hd = 32  # Qwen3's head_dim exceeds hidden_size / num_attention_heads
        cfg = dict(common, architectures=["Qwen3ForCausalLM"], model_type="qwen3", attention_bias=attention_bias,
                   head_dim=hd, max_window_layers=L, rms_norm_eps=1e-6, rope_scaling=None, rope_theta=1000000.0,
                   sliding_window=None, use_sliding_window=False)
    elif family == "phi3":
        cfg = dict(common, architectures=["Phi3ForCausalLM"], model_type="phi3", embd_pdrop=0.0,
                   original_max_position_embeddings=P, pad_token_id=V - 1, resid_pdrop=0.0, rms_norm_eps=1e-5,
                   rope_scaling=None, rope_theta=10000.0, sliding_window=P)
    else:
        raise SystemExit("unknown family " + family)
    r = lambda *s: (rng.standard_normal(s) * 0.2).astype(np.float32)
    one = lambda n: (1 + rng.standard_normal(n) * 0.2).astype(np.float32)
    t = {"model.embed_tokens.weight": r(V, D), "model.norm.weight": one(D)}
    if not tied:
        t["lm_head.weight"] = r(V, D)
    for i in range(L):
        p = "model.layers.%d." % i
        t.update({p + "input_layernorm.weight": one(D), p + "post_attention_layernorm.weight": one(D),
                  p + "self_attn.o_proj.weight": r(D, H * hd), p + "mlp.down_proj.weight": r(D, F)})
        if family == "phi3":
            t[p + "self_attn.qkv_proj.weight"] = r((H + 2 * KV) * hd, D)
            t[p + "mlp.gate_up_proj.weight"] = r(2 * F, D)
            continue
        t.update({p + "self_attn.q_proj.weight": r(H * hd, D), p + "self_attn.k_proj.weight": r(KV * hd, D),
                  p + "self_attn.v_proj.weight": r(KV * hd, D), p + "mlp.gate_proj.weight": r(F, D),
                  p + "mlp.up_proj.weight": r(F, D)})
        if family == "qwen2" or attention_bias:
            t.update({p + "self_attn.q_proj.bias": r(H * hd), p + "self_attn.k_proj.bias": r(KV * hd),
                      p + "self_attn.v_proj.bias": r(KV * hd)})
        if attention_bias:
            t[p + "self_attn.o_proj.bias"] = r(D)
        if family == "qwen3":
            t.update({p + "self_attn.q_norm.weight": one(hd), p + "self_attn.k_norm.weight": one(hd)})
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


def llama3_scaled(inv_freq, rs):
    """Llama 3.1's frequency scaling, as Meta's reference apply_scaling writes
    it: long wavelengths slowed by factor, short ones kept, those between
    interpolated."""
    low_wavelen = rs["original_max_position_embeddings"] / rs["low_freq_factor"]
    high_wavelen = rs["original_max_position_embeddings"] / rs["high_freq_factor"]
    out = []
    for freq in inv_freq:
        wavelen = 2 * np.pi / freq
        if wavelen < high_wavelen:
            out.append(freq)
        elif wavelen > low_wavelen:
            out.append(freq / rs["factor"])
        else:
            smooth = (rs["original_max_position_embeddings"] / wavelen - rs["low_freq_factor"]) / (
                rs["high_freq_factor"] - rs["low_freq_factor"])
            out.append((1 - smooth) * freq / rs["factor"] + smooth * freq)
    return np.array(out)


def llama_logits(cfg, w, tokens):
    """Llama, and the families laid out like it: Mistral, Qwen2, Qwen3, Phi-3."""
    family = cfg["model_type"]
    D, H = cfg["hidden_size"], cfg["num_attention_heads"]
    KV = cfg.get("num_key_value_heads") or H
    hd = D // H
    if family != "phi3" and cfg.get("head_dim"):
        hd = cfg["head_dim"]
    elif family == "qwen3":
        hd = 128  # Qwen3Config's default
    T, eps = len(tokens), cfg["rms_norm_eps"]
    theta = cfg.get("rope_theta", 10000.0)
    rs = cfg.get("rope_scaling") or {}
    kind = rs.get("rope_type", rs.get("type", "default"))
    # Which projections carry biases: Qwen2's q, k and v always; Llama's and
    # Qwen3's q, k, v and o with attention_bias; Mistral's and Phi-3's none.
    qkv_bias = family == "qwen2" or (family in ("llama", "qwen3") and cfg.get("attention_bias", False))
    o_bias = family in ("llama", "qwen3") and cfg.get("attention_bias", False)

    def rms(x, name):
        return x / np.sqrt((x**2).mean(-1, keepdims=True) + eps) * w[name + ".weight"]

    def lin(x, name, bias=False):  # torch Linear stores [out, in]
        y = x @ w[name + ".weight"].T
        return y + w[name + ".bias"] if bias else y

    inv_freq = 1.0 / theta ** (np.arange(0, hd, 2) / hd)
    factor = 1.0
    if kind == "linear":
        factor = rs["factor"]
    elif kind == "llama3":
        inv_freq = llama3_scaled(inv_freq, rs)
    elif kind != "default":
        raise SystemExit("rope_scaling %s is not in the reference" % kind)
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
        if family == "phi3":  # one fused projection: q rows, then k, then v
            qkv = lin(a, p + "self_attn.qkv_proj")
            q, k, v = qkv[:, : H * hd], qkv[:, H * hd : (H + KV) * hd], qkv[:, (H + KV) * hd :]
        else:
            q = lin(a, p + "self_attn.q_proj", qkv_bias)
            k = lin(a, p + "self_attn.k_proj", qkv_bias)
            v = lin(a, p + "self_attn.v_proj", qkv_bias)
        q = q.reshape(T, H, hd)
        k = k.reshape(T, KV, hd)
        if family == "qwen3":  # RMSNorm of each head over head_dim, before RoPE
            q, k = rms(q, p + "self_attn.q_norm"), rms(k, p + "self_attn.k_norm")
        q, k = rope(q.transpose(1, 0, 2)), rope(k.transpose(1, 0, 2))
        v = v.reshape(T, KV, hd).transpose(1, 0, 2)
        k, v = np.repeat(k, H // KV, axis=0), np.repeat(v, H // KV, axis=0)
        y = attend(q, k, v).transpose(1, 0, 2).reshape(T, H * hd)
        x = x + lin(y, p + "self_attn.o_proj", o_bias)
        a = rms(x, p + "post_attention_layernorm")
        if family == "phi3":  # gate rows, then up rows
            gate, up = np.split(lin(a, p + "mlp.gate_up_proj"), 2, axis=-1)
        else:
            gate, up = lin(a, p + "mlp.gate_proj"), lin(a, p + "mlp.up_proj")
        x = x + lin(silu(gate) * up, p + "mlp.down_proj")
    x = rms(x, "model.norm")
    head = w["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else w["lm_head.weight"]
    return x @ head.T


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    mk = sub.add_parser("make")
    mk.add_argument("dir")
    mk.add_argument("--family", choices=["gpt2", "llama", "llama3", "mistral", "qwen2", "qwen3", "phi3"], required=True)
    mk.add_argument("--dtype", choices=["float32", "float16", "bfloat16"], default="float32")
    mk.add_argument("--shards", type=int, default=1)
    mk.add_argument("--seed", type=int, default=0)
    mk.add_argument("--rope-scaling", type=float, default=0)
    mk.add_argument("--tied", action="store_true")
    mk.add_argument("--vocab", type=int, default=0)
    mk.add_argument("--attention-bias", action="store_true")
    lg = sub.add_parser("logits")
    lg.add_argument("dir")
    lg.add_argument("out")
    lg.add_argument("tokens", type=int, nargs="+")
    a = ap.parse_args()
    if a.cmd == "make":
        rng = np.random.default_rng(a.seed)
        if a.family == "gpt2":
            cfg, t = make_gpt2(rng, a.tied, a.vocab)
        elif a.family == "llama":
            cfg, t = make_llama(rng, a.tied, a.rope_scaling, a.vocab)
        else:
            cfg, t = make_family(rng, a.family, a.tied, a.attention_bias, a.vocab)
        cfg["torch_dtype"] = a.dtype
        write_folder(a.dir, cfg, t, a.dtype, a.shards)
        return
    cfg, w = read_folder(a.dir)
    fwd = gpt2_logits if cfg["model_type"] == "gpt2" else llama_logits
    fwd(cfg, w, np.array(a.tokens)).astype("<f4").tofile(a.out)


if __name__ == "__main__":
    sys.exit(main())
