"""Prints, for every tensor of a GGUF file, its name, type and the SHA-256
of its values as little-endian float32, dequantized by llama.cpp's own
Python package (gguf.quants.dequantize), one tensor a line:

  gguf_digests.py FILE MAX_ROWS

Only the first MAX_ROWS rows of a tensor are hashed (the token embedding
of a large vocabulary would take gigabytes of numpy temporaries).
"""

import hashlib
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


def main():
    reader = GGUFReader(sys.argv[1])
    max_rows = int(sys.argv[2])
    for t in reader.tensors:
        data = t.data
        if data.ndim > 1:
            data = data.reshape(-1, data.shape[-1])[:max_rows]
        vals = dequantize(data, t.tensor_type)
        digest = hashlib.sha256(np.ascontiguousarray(vals, dtype="<f4").tobytes()).hexdigest()
        print(t.name, t.tensor_type.name, digest)


if __name__ == "__main__":
    main()
