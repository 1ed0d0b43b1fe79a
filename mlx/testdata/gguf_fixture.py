"""Writes small GGUF files for mlx's GGUF tests with llama.cpp's own Python
package (`gguf`), independently of posttrainllm's reader:

  gguf_fixture.py DIR

DIR/all.gguf holds a metadata value of every GGUF type and tensors of every
type LoadGGUF reads (F32, F16, BF16, I32, Q4_0, Q4_1, Q8_0), with
general.alignment 64. DIR/expected.json lists the metadata values and each
tensor's type and row-major shape; DIR/NAME.f32 holds each tensor's values
as little-endian float32, dequantized by gguf.quants.dequantize.
DIR/blocks.gguf holds the same metadata and a tensor of random blocks of
every type MLX cannot read exactly but LoadGGUF decodes itself (Q5_0, Q5_1,
Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K) beside Q4_0, Q4_1, Q8_0 and F32 ones;
DIR/blocks.json lists them as expected.json does. The gguf package has no
Q8_K decoder: its values are d·q in float32, ggml's dequantize_row_q8_K.
DIR/iq4nl.gguf holds one IQ4_NL tensor (a type LoadGGUF refuses), DIR/f64.gguf a
float64 metadata value (which MLX's reader mis-sizes, so LoadGGUF refuses it).
"""

import json
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q
from gguf.quants import dequantize, quantize


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(7)
    w = gguf.GGUFWriter(os.path.join(out, "all.gguf"), "llama")
    w.add_custom_alignment(64)
    meta = {
        "t.u8": (w.add_uint8, 200), "t.i8": (w.add_int8, -100), "t.u16": (w.add_uint16, 60000),
        "t.i16": (w.add_int16, -30000), "t.u32": (w.add_uint32, 4000000000), "t.i32": (w.add_int32, -2000000000),
        "t.f32": (w.add_float32, 0.15625), "t.bool": (w.add_bool, True), "t.u64": (w.add_uint64, 2**40 + 3),
        "t.i64": (w.add_int64, -(2**40) - 5),
        "t.str": (w.add_string, "héllo\u0000wörld"),
        "t.strs": (w.add_array, ["a", "", "Ġthe", "<|im_end|>", "日本"]),
        "t.ints": (w.add_array, [3, -1, 7]),
        "t.floats": (w.add_array, [0.5, -1.25]),
    }
    for k, (add, v) in meta.items():
        add(k, v)
    tensors = {}

    def add(name, arr, qtype):
        if qtype in (Q.F32, Q.I32):
            data = arr
        elif qtype == Q.F16:
            data = arr.astype(np.float16)
        else:
            data = quantize(arr.astype(np.float32), qtype)
        w.add_tensor(name, data, raw_dtype=None if qtype in (Q.F32, Q.F16, Q.I32) else qtype)
        tensors[name] = (qtype, list(arr.shape), data)

    add("f32.weight", rng.standard_normal((3, 5)).astype(np.float32), Q.F32)
    add("f16.weight", rng.standard_normal((2, 4, 6)).astype(np.float32), Q.F16)
    add("bf16.weight", (rng.standard_normal((3, 8)) * 1e5).astype(np.float32), Q.BF16)
    add("i32.weight", np.arange(-5, 7, dtype=np.int32).reshape(3, 4), Q.I32)
    add("q4_0.weight", rng.standard_normal((5, 64)).astype(np.float32), Q.Q4_0)
    add("q4_1.weight", (rng.standard_normal((4, 96)) + 0.3).astype(np.float32), Q.Q4_1)
    add("q8_0.weight", rng.standard_normal((3, 2, 64)).astype(np.float32), Q.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    expected = {"metadata": {k: v for k, (_, v) in meta.items()}, "tensors": {}}
    for name, (qtype, shape, data) in tensors.items():
        vals = data if qtype in (Q.F32, Q.F16, Q.I32) else dequantize(data, qtype)
        np.asarray(vals, dtype="<f4").reshape(shape).tofile(os.path.join(out, name + ".f32"))
        expected["tensors"][name] = {"type": qtype.name, "shape": shape}
    with open(os.path.join(out, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(expected, f, ensure_ascii=False)

    w = gguf.GGUFWriter(os.path.join(out, "f64.gguf"), "llama")
    w.add_float64("t.f64", 0.25)
    w.add_tensor("f32.weight", np.ones((2, 3), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    write_blocks(out, meta, rng)

    w = gguf.GGUFWriter(os.path.join(out, "iq4nl.gguf"), "llama")
    w.add_tensor("iq4nl.weight", rng.integers(0, 255, (2, 18), dtype=np.uint8), raw_dtype=Q.IQ4_NL)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# Byte offsets of each block type's float16 scales, and its block size in bytes.
HALVES = {Q.Q4_0: ([0], 18), Q.Q4_1: ([0, 2], 20), Q.Q5_0: ([0], 22), Q.Q5_1: ([0, 2], 24), Q.Q8_0: ([0], 34),
          Q.Q2_K: ([80, 82], 84), Q.Q3_K: ([108], 110), Q.Q4_K: ([0, 2], 144), Q.Q5_K: ([0, 2], 176),
          Q.Q6_K: ([208], 210), Q.Q8_K: ([], 292)}


def random_blocks(rng, qtype, n):
    """n blocks of random bytes whose scales are finite: normal float16s over
    a wide range of exponents, some subnormal, some zeros of either sign."""
    offsets, size = HALVES[qtype]
    b = rng.integers(0, 256, (n, size), dtype=np.uint8)
    for off in offsets:
        h = (rng.standard_normal(n) * np.exp2(rng.integers(-20, 8, n))).astype(np.float16)
        h[::7] = np.float16(-0.0)
        h[3::11] = np.float16(5.96e-8) * rng.integers(1, 1023, len(h[3::11]))
        b[:, off:off + 2] = h.view(np.uint8).reshape(n, 2)
    if qtype == Q.Q8_K:
        d = (rng.standard_normal(n) * np.exp2(rng.integers(-30, 30, n))).astype(np.float32)
        b[:, 0:4] = d.view(np.uint8).reshape(n, 4)
    return b


def dequantize_q8_k(blocks):
    d = blocks[:, 0:4].copy().view(np.float32)
    q = blocks[:, 4:260].view(np.int8).astype(np.float32)
    return (d * q).reshape(-1)


def write_blocks(out, meta, rng):
    w = gguf.GGUFWriter(os.path.join(out, "blocks.gguf"), "llama")
    w.add_custom_alignment(64)
    for k, (add, v) in meta.items():
        getattr(w, add.__name__)(k, v)
    expected = {"metadata": {k: v for k, (_, v) in meta.items()}, "tensors": {}}
    f32 = rng.standard_normal((2, 3)).astype(np.float32)
    w.add_tensor("blocks_f32.weight", f32)
    f32.astype("<f4").tofile(os.path.join(out, "blocks_f32.weight.f32"))
    expected["tensors"]["blocks_f32.weight"] = {"type": "F32", "shape": [2, 3]}
    for qtype, (_, size) in HALVES.items():
        per = 256 if qtype.name.endswith("_K") else 32
        rows, cols = 3, 2 * 256  # every type's blocks tile rows of 512
        b = random_blocks(rng, qtype, rows * cols // per)
        name = "blocks_%s.weight" % qtype.name.lower()
        w.add_tensor(name, b.reshape(rows, -1), raw_dtype=qtype)
        vals = dequantize_q8_k(b) if qtype == Q.Q8_K else dequantize(b.reshape(rows, -1), qtype)
        np.asarray(vals, dtype="<f4").reshape(rows, cols).tofile(os.path.join(out, name + ".f32"))
        expected["tensors"][name] = {"type": qtype.name, "shape": [rows, cols]}
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with open(os.path.join(out, "blocks.json"), "w", encoding="utf-8") as f:
        json.dump(expected, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
