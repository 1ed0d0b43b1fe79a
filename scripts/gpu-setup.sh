#!/usr/bin/env bash
# Installs MLX's CUDA backend (mlx-cuda-13) and the MLX Python frontend (mlx)
# into the current python3's environment with pip, and checks that MLX sees
# the GPU.
#
#   scripts/gpu-setup.sh            # install if missing, then check
#   scripts/gpu-setup.sh libdir     # print the search path for the CUDA libmlx.so
#   scripts/gpu-setup.sh installed  # exit 0 if mlx and mlx-cuda-13 are installed at the pinned version
#
# pip brings the CUDA libraries mlx-cuda-13 depends on (cuBLAS, cuDNN, NCCL,
# NVRTC, ...) into the same environment. libmlx.so of the wheel finds them
# through its rpath ($ORIGIN/../../nvidia/...), which is why it goes into
# that environment rather than into a folder of its own. On a machine with
# no package registry, install the wheels with scripts/offline/setup.sh
# first; this script then finds them installed and only checks.
set -euo pipefail

MLX_VERSION="${MLX_VERSION:-0.32.4}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-python3}"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore

# libdir prints the search path for programs linked against libmlx.so: the
# wheel's mlx/lib, then the environment's nvidia/*/lib folders, so libmlx.so
# finds the CUDA libraries even where its rpath does not match their layout.
libdir() {
  "$python" -P - <<'PY'
import glob, importlib.util, os
spec = importlib.util.find_spec("mlx")  # finds the package without loading libmlx.so
if spec is None or not spec.submodule_search_locations:
    raise SystemExit("gpu-setup: the mlx package is not installed")
pkg = list(spec.submodule_search_locations)[0]
mlx_lib = os.path.join(pkg, "lib")
site = os.path.dirname(pkg)
print(":".join([mlx_lib] + sorted(glob.glob(os.path.join(site, "nvidia", "*", "lib")))))
PY
}

have() {
  "$python" -P - "$MLX_VERSION" <<'PY' 2>/dev/null
import sys
from importlib import metadata
want = sys.argv[1]
ok = all(metadata.version(p) == want for p in ("mlx", "mlx-cuda-13"))
sys.exit(0 if ok else 1)
PY
}


cmd="${1:-install}"
case "$cmd" in
  libdir)
    libdir
    exit 0
    ;;
  installed) # exit status only: are mlx and mlx-cuda-13 $MLX_VERSION installed?
    have
    exit
    ;;
  install) ;;
  *)
    echo "gpu-setup: unknown command '$cmd': want install, installed or libdir" >&2
    exit 2
    ;;
esac

if have; then
  echo "gpu-setup: mlx and mlx-cuda-13 $MLX_VERSION already installed"
else
  if compgen -G "$root/.gpu/load*" >/dev/null; then
    echo "gpu-setup: .gpu/ holds carried wheels; on a machine without a registry run scripts/offline/setup.sh instead" >&2
  fi
  echo "gpu-setup: installing mlx-cuda-13==$MLX_VERSION mlx==$MLX_VERSION from the index"
  "$python" -m pip install -q "mlx-cuda-13==$MLX_VERSION" "mlx==$MLX_VERSION"
fi

path="$(libdir)"
lib="${path%%:*}/libmlx.so"
if missing="$(LD_LIBRARY_PATH="$path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ldd "$lib" | grep 'not found')"; then
  echo "gpu-setup: $lib cannot find:" >&2
  echo "$missing" >&2
  exit 1
fi
export LD_LIBRARY_PATH="$path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
"$python" -P - <<'PY'
import mlx.core as mx
dev = mx.default_device()
x = mx.ones((256, 256))
s = (x @ x).sum().item()
print(f"gpu-setup: mlx {mx.__version__}, default device {dev}, check {s:.0f}")
if dev != mx.gpu or s != 256 ** 3:
    raise SystemExit("gpu-setup: MLX does not run on the GPU")
PY
