"""mlx-lm as the reference for MLX-quantized folders (make mlxlm-deps).

Commands:
  quantize SRC DST GROUP_SIZE BITS
      what `mlx_lm.convert -q` does to the float folder SRC, written to DST:
      mlx-lm's own load_model, quantize_model (every Linear and the
      embedding whose input side the group size divides), save_model and
      save_config. The tokenizer step of convert is left out (the test
      folders have none).
  logits DIR OUT TOKEN...
      mlx-lm's model of the folder DIR (quantized or not) on the tokens
      (batch 1): float32 logits [T, V] written raw, little-endian, to OUT.
"""
import sys
from pathlib import Path

import mlx.core as mx
import numpy as np
from mlx_lm.utils import load_model, quantize_model, save_config, save_model


def quantize(src, dst, group_size, bits):
    model, config = load_model(Path(src))
    model, config = quantize_model(model, config, group_size=int(group_size), bits=int(bits))
    save_model(Path(dst), model)
    save_config(config, config_path=Path(dst) / "config.json")


def logits(path, out, *tokens):
    model, _ = load_model(Path(path))
    x = mx.array([[int(t) for t in tokens]], dtype=mx.int32)
    y = model(x).astype(mx.float32)
    mx.eval(y)
    np.asarray(y[0], dtype="<f4").tofile(out)


if __name__ == "__main__":
    {"quantize": quantize, "logits": logits}[sys.argv[1]](*sys.argv[2:])
