#!/usr/bin/env bash
# Installs the pinned MLX backend wheel into a project-local, git-ignored
# folder (.deps/mlx by default) with pip. Idempotent: a matching install is
# left alone; a different version is replaced.
#
#   scripts/install-mlx.sh            # mlx-cpu (CI, developer machines)
#   MLX_BACKEND=cuda-13 scripts/install-mlx.sh   # NVIDIA, CUDA 13
#
# cgo reads the headers and libmlx.so from .deps/mlx through ${SRCDIR}-relative
# flags in mlx/cgo.go, and the binary finds libmlx.so through its rpath.
# scripts/install-blas.sh (run next by make) swaps the wheel's reference BLAS
# for OpenBLAS.
set -euo pipefail

MLX_VERSION="${MLX_VERSION:-0.32.4}"
MLX_BACKEND="${MLX_BACKEND:-cpu}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="${MLX_PREFIX:-$root/.deps/mlx}"
pkg="mlx-${MLX_BACKEND}"
stamp="$dest/.installed"
want="${pkg}==${MLX_VERSION}"

if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" && -f "$dest/mlx/lib/libmlx.so" ]]; then
  echo "MLX: $want already installed in $dest"
  exit 0
fi

python=""
for p in python3 python; do
  if command -v "$p" >/dev/null 2>&1; then python="$p"; break; fi
done
if [[ -z "$python" ]]; then
  echo "install-mlx: python3 with pip is needed to fetch $want" >&2
  exit 1
fi
if ! "$python" -m pip --version >/dev/null 2>&1; then
  echo "install-mlx: '$python -m pip' is not available; install pip for $python" >&2
  exit 1
fi

echo "MLX: installing $want into $dest"
tmp="$(mktemp -d "${dest%/*}/.mlx-install.XXXXXX" 2>/dev/null || { mkdir -p "${dest%/*}"; mktemp -d "${dest%/*}/.mlx-install.XXXXXX"; })"
trap 'rm -rf "$tmp"' EXIT
PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore \
  "$python" -m pip install --quiet --no-deps --no-compile --target "$tmp" "$want"

got="$(sed -n 's/^Version: //p' "$tmp"/mlx_*-"${MLX_VERSION}".dist-info/METADATA 2>/dev/null | head -1)"
if [[ "$got" != "$MLX_VERSION" ]]; then
  echo "install-mlx: expected $want, pip installed version '${got:-unknown}'" >&2
  exit 1
fi
if [[ ! -f "$tmp/mlx/lib/libmlx.so" || ! -f "$tmp/mlx/include/mlx/mlx.h" ]]; then
  echo "install-mlx: $want carries no mlx/lib/libmlx.so or headers" >&2
  exit 1
fi
echo "$want" >"$tmp/.installed"
rm -rf "$dest"
mv "$tmp" "$dest"
trap - EXIT
echo "MLX: $want installed"
