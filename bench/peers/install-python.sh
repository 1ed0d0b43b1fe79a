#!/usr/bin/env bash
# Installs MLX Python for bench/peers/mlx_peer.py into .deps/peers/python,
# project-locally, on the same libmlx.so as the Go binary: the mlx wheel of
# the version in .deps/mlx brings only the Python extension (mlx/core*.so,
# which loads $ORIGIN/lib/libmlx.so) and mlx.nn/mlx.optimizers; its lib/
# and the BLAS folder beside it are links to .deps/mlx, whose libblas is
# the OpenBLAS shim of cmd/install-mlx. So MLX Python's matmuls run in the
# same OpenBLAS as posttrainllm's. Run by `make peers`; idempotent.
set -euo pipefail
cd "$(dirname "$0")/../.."
MLX=.deps/mlx
DEST=.deps/peers/python
NUMPY_VERSION=2.3.5
dist=$(ls -d "$MLX"/mlx_cpu-*.dist-info 2>/dev/null | head -1)
if [ -z "$dist" ]; then
	echo "install-python.sh: no mlx_cpu wheel in $MLX; run make deps first" >&2
	exit 1
fi
version=$(basename "$dist" .dist-info)
version=${version#mlx_cpu-}
stamp="mlx==$version numpy==$NUMPY_VERSION"
if [ "$(cat "$DEST/.installed" 2>/dev/null)" != "$stamp" ]; then
	rm -rf "$DEST"
	python3 -m pip install --quiet --no-deps --target "$DEST" "mlx==$version" "numpy==$NUMPY_VERSION"
	echo "$stamp" >"$DEST/.installed"
fi
# The wheel's own lib/ (if any) gives way to the project's library.
rm -rf "$DEST/mlx/lib" "$DEST/mlx_cpu.libs"
ln -s "$PWD/$MLX/mlx/lib" "$DEST/mlx/lib"
ln -s "$PWD/$MLX/mlx_cpu.libs" "$DEST/mlx_cpu.libs"
PYTHONPATH="$DEST" python3 -c 'import mlx.core as mx; print("MLX Python", mx.__version__, "on", mx.default_device())'
