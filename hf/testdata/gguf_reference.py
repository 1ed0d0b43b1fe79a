"""Independent float64 reference for a GGUF file of a Llama model, for the
Go tests of hf's GGUF import:

  gguf_reference.py loss FILE.gguf TOKENIZER_JSON TEXT N WINDOW OUTDIR
      tokenizes TEXT with the `tokenizers` library and TOKENIZER_JSON, takes
      its first N+1 ids and runs the model in float64 on N/WINDOW windows of
      WINDOW tokens, each predicting the next WINDOW ids; writes the ids to
      OUTDIR/ids.i32 (little-endian int32) and the mean cross-entropy over
      the N predictions to OUTDIR/loss.txt.
  gguf_reference.py logits FILE.gguf OUT TOKENS...
      runs the model on TOKENS (one sequence) in float64 and writes the
      [T, vocab] logits to OUT as little-endian float32
  gguf_reference.py make OUT.gguf --arch A --pre P [--iq4nl]
      writes a tiny random Llama-shaped GGUF (F32 norms, Q8_0 embeddings,
      Q4_0/Q4_1/F16/BF16 projections, untied output) whose general.architecture
      is A (llama or qwen2, with q/k/v biases; or any name, for refusals) and
      tokenizer.ggml.pre is P; --iq4nl stores one tensor as IQ4_NL (an
      I-quant, which import refuses).

The weights are read and dequantized by llama.cpp's own Python package
(`gguf`), llama.cpp's q/k row permutation is undone here, and the forward
pass is reference.py's numpy Llama, written from the architecture.
"""

import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q
from gguf import GGUFReader
from gguf.quants import dequantize, quantize

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference import llama_logits  # noqa: E402


def arch(r):
    f = r.fields["general.architecture"]
    return bytes(f.parts[f.data[0]]).decode()


def value(r, key, default=None):
    f = r.fields.get(key)
    if f is None:
        return default
    return f.parts[f.data[0]][0].item()


def hf_weights(r, heads, kv, permuted):
    per = {
        "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
        "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
        "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
        "ffn_down": "mlp.down_proj",
    }
    top = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
    w = {}
    for t in r.tensors:
        a = dequantize(t.data, t.tensor_type).astype(np.float64).reshape([int(d) for d in reversed(t.shape)])
        base, suffix = t.name.rsplit(".", 1)
        if base.startswith("blk."):
            _, layer, kind = base.split(".")
            n = {"attn_q": heads, "attn_k": kv}.get(kind)
            if n and permuted and suffix == "weight":
                # llama.cpp stores reshape(n, 2, hd/2, in).swapaxes(1, 2): put the halves back
                rows = a.shape[0]
                a = a.reshape(n, rows // n // 2, 2, a.shape[1]).swapaxes(1, 2).reshape(rows, a.shape[1])
            name = "model.layers.%s.%s.%s" % (layer, per[kind], suffix)
        else:
            name = top[base] + "." + suffix
        w[name] = a
    return w


def read_model(path):
    """The reference's config and float64 weights (Hugging Face names) of a GGUF file."""
    r = GGUFReader(path)
    a = arch(r)  # llama or qwen2; llama.cpp permutes the q and k rows of llama only
    heads = value(r, a + ".attention.head_count")
    kv = value(r, a + ".attention.head_count_kv", heads)
    w = hf_weights(r, heads, kv, a == "llama")
    cfg = {
        "model_type": a, "hidden_size": value(r, a + ".embedding_length"), "num_attention_heads": heads,
        "num_key_value_heads": kv, "num_hidden_layers": value(r, a + ".block_count"),
        "rms_norm_eps": value(r, a + ".attention.layer_norm_rms_epsilon"),
        "rope_theta": value(r, a + ".rope.freq_base", 10000.0), "tie_word_embeddings": "lm_head.weight" not in w,
    }
    return cfg, w


def loss(path, tok_json, text_path, n, window, out):
    from tokenizers import Tokenizer

    cfg, w = read_model(path)
    with open(text_path, encoding="utf-8") as f:
        ids = Tokenizer.from_file(tok_json).encode(f.read()).ids[: n + 1]
    if len(ids) < n + 1 or n % window:
        sys.exit("need %d ids in windows of %d, have %d" % (n + 1, window, len(ids)))
    total = 0.0
    for s in range(0, n, window):
        x, y = np.array(ids[s : s + window]), np.array(ids[s + 1 : s + window + 1])
        z = llama_logits(cfg, w, x)
        z = z - z.max(-1, keepdims=True)
        lse = np.log(np.exp(z).sum(-1))
        total += float((lse - z[np.arange(window), y]).sum())
    os.makedirs(out, exist_ok=True)
    np.array(ids, dtype="<i4").tofile(os.path.join(out, "ids.i32"))
    with open(os.path.join(out, "loss.txt"), "w") as f:
        f.write("%.17g\n" % (total / n))


def make(path, arch, pre, iq4nl):
    rng = np.random.default_rng(3)
    D, L, H, KV, F, V, P = 64, 2, 4, 2, 96, 128, 64
    w = gguf.GGUFWriter(path, arch)
    w.add_block_count(L)
    w.add_context_length(P)
    w.add_embedding_length(D)
    w.add_feed_forward_length(F)
    w.add_head_count(H)
    w.add_head_count_kv(KV)
    w.add_rope_dimension_count(D // H)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    tokens = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] + [chr(0x100 + i) for i in range(V - 3)]
    w.add_token_list(tokens)
    w.add_token_types([3, 3, 3] + [1] * (V - 3))
    w.add_token_merges(["%s %s" % (tokens[3], tokens[4])])
    w.add_eos_token_id(0)
    w.add_bos_token_id(1)

    def add(name, shape, qtype, scale=0.2, shift=0.0):
        a = (rng.standard_normal(shape) * scale + shift).astype(np.float32)
        if qtype == Q.F32:
            w.add_tensor(name, a)
        elif qtype == Q.F16:
            w.add_tensor(name, a.astype(np.float16))
        else:
            w.add_tensor(name, quantize(a, qtype), raw_dtype=qtype)

    add("token_embd.weight", (V, D), Q.Q8_0)
    add("output.weight", (V, D), Q.BF16)
    add("output_norm.weight", (D,), Q.F32, shift=1.0)
    hd = D // H
    for i in range(L):
        p = "blk.%d." % i
        add(p + "attn_norm.weight", (D,), Q.F32, shift=1.0)
        add(p + "ffn_norm.weight", (D,), Q.F32, shift=1.0)
        add(p + "attn_q.weight", (H * hd, D), Q.Q4_0)
        add(p + "attn_k.weight", (KV * hd, D), Q.Q4_1)
        add(p + "attn_v.weight", (KV * hd, D), Q.F16)
        if arch == "qwen2":
            for n, rows in (("q", H * hd), ("k", KV * hd), ("v", KV * hd)):
                add(p + "attn_%s.bias" % n, (rows,), Q.F32)
        add(p + "attn_output.weight", (D, H * hd), Q.Q8_0)
        add(p + "ffn_gate.weight", (F, D), Q.BF16)
        add(p + "ffn_up.weight", (F, D), Q.Q4_1)
        if iq4nl and i == L - 1:
            w.add_tensor(p + "ffn_down.weight", rng.integers(0, 255, (D, F // 32 * 18), dtype=np.uint8), raw_dtype=Q.IQ4_NL)
        else:
            add(p + "ffn_down.weight", (D, F), Q.F32)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "loss" and len(sys.argv) == 8:
        loss(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6]), sys.argv[7])
    elif len(sys.argv) >= 5 and sys.argv[1] == "logits":
        cfg, w = read_model(sys.argv[2])
        llama_logits(cfg, w, np.array([int(t) for t in sys.argv[4:]])).astype("<f4").tofile(sys.argv[3])
    elif len(sys.argv) >= 2 and sys.argv[1] == "make":
        import argparse

        ap = argparse.ArgumentParser()
        ap.add_argument("out")
        ap.add_argument("--arch", default="llama")
        ap.add_argument("--pre", default="smollm")
        ap.add_argument("--iq4nl", action="store_true")
        a = ap.parse_args(sys.argv[2:])
        make(a.out, a.arch, a.pre, a.iq4nl)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
