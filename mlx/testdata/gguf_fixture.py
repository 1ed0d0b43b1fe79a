"""Writes small GGUF files for mlx's GGUF tests with llama.cpp's own Python
package (`gguf`), independently of posttrainllm's reader:

  gguf_fixture.py DIR

DIR/all.gguf holds a metadata value of every GGUF type and tensors of every
type LoadGGUF reads (F32, F16, BF16, I32, Q4_0, Q4_1, Q8_0), with
general.alignment 64. DIR/expected.json lists the metadata values and each
tensor's type and row-major shape; DIR/NAME.f32 holds each tensor's values
as little-endian float32, dequantized by gguf.quants.dequantize.
DIR/q4k.gguf holds one Q4_K tensor (a type LoadGGUF refuses), DIR/f64.gguf a
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

    w = gguf.GGUFWriter(os.path.join(out, "q4k.gguf"), "llama")
    w.add_tensor("q4k.weight", rng.integers(0, 255, (2, 144), dtype=np.uint8), raw_dtype=Q.Q4_K)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
