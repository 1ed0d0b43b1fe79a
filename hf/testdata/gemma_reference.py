"""Independent float64 reference for a GGUF file of Gemma 3 (architecture
gemma3), for the Go tests of hf's Gemma import:

  gemma_reference.py loss FILE.gguf TOKENIZER_JSON TEXT N WINDOW OUTDIR
      tokenizes TEXT with the `tokenizers` library and TOKENIZER_JSON (its
      template adds <bos>), takes the first N+1 ids and runs the model on
      N/WINDOW windows of WINDOW tokens, each predicting the next WINDOW
      ids; writes the ids to OUTDIR/ids.i32 (little-endian int32) and the
      mean cross-entropy to OUTDIR/loss.txt
  gemma_reference.py logits FILE.gguf OUT POSITIONS TOKENS...
      runs the model on TOKENS (one sequence) and writes the logits at the
      comma-separated POSITIONS to OUT as little-endian float32, then the
      same positions' logits with every layer attending to the whole
      prefix (no sliding window)
  gemma_reference.py folder-logits DIR OUT TOKENS...
      runs the Gemma3ForCausalLM folder DIR (config.json, float32
      model.safetensors, Hugging Face's names, norms stored as w of
      1 + w) on TOKENS and writes the [T, vocab] logits to OUT as
      little-endian float32
  gemma_reference.py greedy FILE.gguf N IDS [IDS ...]
      continues each prompt IDS (comma-separated) by its N most likely
      tokens; prints one line per prompt: the ids, then after "#" the
      smallest gap between the two largest logits along the way

The weights are read and dequantized by llama.cpp's own Python package
(`gguf`); the forward pass is written from Gemma 3's architecture
(Hugging Face's Gemma3ForCausalLM): embeddings times sqrt(hidden), RMSNorm
before and after attention and the MLP (llama.cpp stores the norms' gains
1 + w), per-head RMSNorm of q and k, rotate-half rotary positions with base
10,000 on sliding layers and the file's freq_base on every sixth (global)
layer, sliding layers attending to the `sliding_window` most recent
positions, scores scaled by 1/sqrt(head size), a GELU-tanh gated MLP and
the head tied to the embeddings; all in float64.
"""

import os
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


def value(r, key):
    f = r.fields[key]
    return f.parts[f.data[0]][0].item()


def read_model(path):
    r = GGUFReader(path)
    a = "gemma3"
    cfg = {
        "d": value(r, a + ".embedding_length"), "layers": value(r, a + ".block_count"),
        "heads": value(r, a + ".attention.head_count"), "kv": value(r, a + ".attention.head_count_kv"),
        "hd": value(r, a + ".attention.key_length"), "eps": value(r, a + ".attention.layer_norm_rms_epsilon"),
        "base": value(r, a + ".rope.freq_base"), "window": value(r, a + ".attention.sliding_window"),
    }
    w = {}
    for t in r.tensors:
        vals = dequantize(t.data, t.tensor_type).reshape([int(d) for d in reversed(t.shape)])
        # the embedding stays float32 (exact) to halve its memory; matmuls upcast it
        w[t.name] = vals.astype(np.float32 if t.name == "token_embd.weight" else np.float64)
    return cfg, w


HF_NAMES = {
    "input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm", "post_attention_layernorm": "post_attention_norm",
    "pre_feedforward_layernorm": "ffn_norm", "post_feedforward_layernorm": "post_ffw_norm",
    "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
}


def read_folder(d):
    """The config and float64 weights, under llama.cpp's names, of a Gemma3ForCausalLM folder."""
    import json

    from safetensors.numpy import load_file

    with open(os.path.join(d, "config.json")) as f:
        c = json.load(f)
    cfg = {"d": c["hidden_size"], "layers": c["num_hidden_layers"], "heads": c["num_attention_heads"],
           "kv": c["num_key_value_heads"], "hd": c["head_dim"], "eps": c["rms_norm_eps"], "base": c["rope_theta"],
           "window": c["sliding_window"]}
    w = {}
    for name, a in load_file(os.path.join(d, "model.safetensors")).items():
        a = a.astype(np.float64)
        if name.endswith("norm.weight"):
            a = 1 + a  # Gemma's RMSNorm multiplies by (1 + w)
        if name == "model.embed_tokens.weight":
            w["token_embd.weight"] = a.astype(np.float32)
        elif name == "model.norm.weight":
            w["output_norm.weight"] = a
        else:
            _, _, layer, rest = name.split(".", 3)
            w["blk.%s.%s.weight" % (layer, HF_NAMES[rest.rsplit(".", 1)[0]])] = a
    return cfg, w


def rms(x, g, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * g


def rope(x, base):
    """Rotate-half rotary positions over x [heads, T, hd], positions 0…T-1."""
    hd, T = x.shape[-1], x.shape[-2]
    inv = base ** (-np.arange(0, hd, 2, dtype=np.float64) / hd)
    ang = np.arange(T, dtype=np.float64)[:, None] * inv[None, :]
    cos, sin = np.cos(ang), np.sin(ang)
    cos, sin = np.concatenate([cos, cos], -1), np.concatenate([sin, sin], -1)
    half = hd // 2
    rot = np.concatenate([-x[..., half:], x[..., :half]], -1)
    return x * cos + rot * sin


def gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def hidden(cfg, w, tokens, windowed=True):
    """The final normed hidden states [T, d] of tokens."""
    d, H, KV, hd, eps = cfg["d"], cfg["heads"], cfg["kv"], cfg["hd"], cfg["eps"]
    T = len(tokens)
    h = w["token_embd.weight"][tokens].astype(np.float64) * float(np.float32(np.sqrt(d)))
    i, j = np.arange(T)[:, None], np.arange(T)[None, :]
    for l in range(cfg["layers"]):
        p = "blk.%d." % l
        sliding = (l + 1) % 6 != 0
        allowed = j <= i
        if sliding and windowed:
            allowed = allowed & (i - j < cfg["window"])
        x = rms(h, w[p + "attn_norm.weight"], eps)
        q = (x @ w[p + "attn_q.weight"].T).reshape(T, H, hd).transpose(1, 0, 2)
        k = (x @ w[p + "attn_k.weight"].T).reshape(T, KV, hd).transpose(1, 0, 2)
        v = (x @ w[p + "attn_v.weight"].T).reshape(T, KV, hd).transpose(1, 0, 2)
        q, k = rms(q, w[p + "attn_q_norm.weight"], eps), rms(k, w[p + "attn_k_norm.weight"], eps)
        base = 10000.0 if sliding else cfg["base"]
        q, k = rope(q, base), rope(k, base)
        k, v = np.repeat(k, H // KV, 0), np.repeat(v, H // KV, 0)
        s = q @ k.transpose(0, 2, 1) / np.sqrt(hd)
        s = np.where(allowed[None], s, -np.inf)
        s = np.exp(s - s.max(-1, keepdims=True))
        o = (s / s.sum(-1, keepdims=True)) @ v
        a = o.transpose(1, 0, 2).reshape(T, H * hd) @ w[p + "attn_output.weight"].T
        h = h + rms(a, w[p + "post_attention_norm.weight"], eps)
        x = rms(h, w[p + "ffn_norm.weight"], eps)
        m = (gelu_tanh(x @ w[p + "ffn_gate.weight"].T) * (x @ w[p + "ffn_up.weight"].T)) @ w[p + "ffn_down.weight"].T
        h = h + rms(m, w[p + "post_ffw_norm.weight"], eps)
    return rms(h, w["output_norm.weight"], eps)


def loss(path, tok_json, text_path, n, window, out):
    from tokenizers import Tokenizer

    cfg, w = read_model(path)
    with open(text_path, encoding="utf-8") as f:
        ids = Tokenizer.from_file(tok_json).encode(f.read()).ids[: n + 1]
    if len(ids) < n + 1 or n % window:
        sys.exit("need %d ids in windows of %d, have %d" % (n + 1, window, len(ids)))
    e = w["token_embd.weight"].astype(np.float64)
    total = 0.0
    for s in range(0, n, window):
        x, y = np.array(ids[s:s + window]), np.array(ids[s + 1:s + window + 1])
        h = hidden(cfg, w, x)
        for r in range(0, window, 64):
            z = h[r:r + 64] @ e.T
            z = z - z.max(-1, keepdims=True)
            lse = np.log(np.exp(z).sum(-1))
            total += float((lse - z[np.arange(len(z)), y[r:r + 64]]).sum())
    os.makedirs(out, exist_ok=True)
    np.array(ids, dtype="<i4").tofile(os.path.join(out, "ids.i32"))
    with open(os.path.join(out, "loss.txt"), "w") as f:
        f.write("%.17g\n" % (total / n))


def logits(path, out, positions, tokens):
    cfg, w = read_model(path)
    e = w["token_embd.weight"].astype(np.float64)
    rows = []
    for windowed in (True, False):
        h = hidden(cfg, w, np.array(tokens), windowed)
        rows.append(h[positions] @ e.T)
    np.concatenate(rows).astype("<f4").tofile(out)


def greedy(path, n, prompts):
    cfg, w = read_model(path)
    e = w["token_embd.weight"].astype(np.float64)
    for ids in prompts:
        ids, out, gap = list(ids), [], np.inf
        for _ in range(n):
            z = hidden(cfg, w, np.array(ids))[-1] @ e.T
            top = np.sort(z)[-2:]
            gap = min(gap, top[1] - top[0])
            nxt = int(np.argmax(z))
            out.append(nxt)
            ids.append(nxt)
        print(",".join(map(str, out)), "#", "%.6g" % gap)


def main():
    a = sys.argv
    if len(a) == 8 and a[1] == "loss":
        loss(a[2], a[3], a[4], int(a[5]), int(a[6]), a[7])
    elif len(a) >= 6 and a[1] == "logits":
        logits(a[2], a[3], [int(p) for p in a[4].split(",")], [int(t) for t in a[5:]])
    elif len(a) >= 5 and a[1] == "folder-logits":
        cfg, w = read_folder(a[2])
        h = hidden(cfg, w, np.array([int(t) for t in a[4:]]))
        (h @ w["token_embd.weight"].T.astype(np.float64)).astype("<f4").tofile(a[3])
    elif len(a) >= 5 and a[1] == "greedy":
        greedy(a[2], int(a[3]), [[int(t) for t in p.split(",")] for p in a[4:]])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
