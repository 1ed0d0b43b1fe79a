#!/usr/bin/env bash
# Installs MLX's CUDA backend (mlx-cuda-13) and the MLX Python frontend (mlx)
# into the current python3's environment, and checks that MLX sees the GPU.
#
#   scripts/gpu-setup.sh            # install, then check
#   scripts/gpu-setup.sh stash      # keep carried parts outside the tree (see below)
#   scripts/gpu-setup.sh libdir     # print the folder holding the CUDA libmlx.so
#
# Offline (a machine with no registry, such as the lent H200): wheels made by
# scripts/gpu-pack.sh sit in .gpu/load*/ (a wheel too large for one transfer
# is split into NAME.whl.partNN files there, possibly over several loads that
# arrived in consecutive calls); they are joined and installed with
# pip --no-index --no-deps, so the CUDA libraries must already be installed
# in that environment (nvidia-cublas, -cuda-nvrtc, -cuda-runtime,
# -cudnn-cu13, -cufft, -cusolver, -nccl-cu13, as a CUDA 13 PyTorch brings).
# `stash` copies the loads present now to $PTLM_GPU_STASH (default
# /tmp/ptlm-gpu-stash), where a later call on the same machine finds them.
#
# Online (no .gpu/load* folders): pip installs mlx-cuda-13 and mlx with their
# dependencies from the index.
#
# libmlx.so of the wheel finds cuDNN, cuBLAS, NCCL and NVRTC through its
# rpath ($ORIGIN/../../nvidia/...), which is why it goes into the environment
# that holds those packages rather than into a folder of its own.
set -euo pipefail

MLX_VERSION="${MLX_VERSION:-0.32.4}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
stash="${PTLM_GPU_STASH:-/tmp/ptlm-gpu-stash}"
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

# loads lists the folders that may hold carried files, stash last.
loads() {
  local d
  for d in "$root"/.gpu/load* "$stash"/load*; do
    [[ -d "$d" ]] && echo "$d"
  done
  return 0
}

cmd="${1:-install}"
case "$cmd" in
  libdir)
    libdir
    exit 0
    ;;
  stash)
    mkdir -p "$stash"
    for d in $(loads); do
      [[ "$d" == "$stash"/* ]] && continue
      cp -r "$d" "$stash/"
      echo "gpu-setup: stashed $(du -sh "$d" | cut -f1) from $d in $stash"
    done
    exit 0
    ;;
  install) ;;
  *)
    echo "gpu-setup: unknown command '$cmd': want install, stash or libdir" >&2
    exit 2
    ;;
esac

# Carried binaries (gzipped by gpu-pack.sh) go to .gpu/bin.
for d in $(loads); do
  for z in "$d"/*.gz; do
    [[ -f "$z" ]] || continue
    mkdir -p "$root/.gpu/bin"
    b="$root/.gpu/bin/$(basename "${z%.gz}")"
    gunzip -c "$z" >"$b"
    chmod +x "$b"
  done
done

have() {
  "$python" -P - "$MLX_VERSION" <<'PY' 2>/dev/null
import sys
from importlib import metadata
want = sys.argv[1]
ok = all(metadata.version(p) == want for p in ("mlx", "mlx-cuda-13"))
sys.exit(0 if ok else 1)
PY
}

if have; then
  echo "gpu-setup: mlx and mlx-cuda-13 $MLX_VERSION already installed"
else
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  if [[ -n "$(loads)" ]]; then
    # Whole wheels are copied; split ones are joined from their parts in
    # name order, whichever load each part came in.
    for d in $(loads); do
      find "$d" -maxdepth 1 -name '*.whl' -exec cp {} "$work/" \;
    done
    mapfile -t parts < <(for d in $(loads); do find "$d" -maxdepth 1 -name '*.whl.part*'; done |
      awk -F/ '{print $NF "\t" $0}' | sort -u -k1,1 | cut -f2)
    for p in "${parts[@]}"; do
      whl="$(basename "${p%.part*}")"
      cat "$p" >>"$work/$whl"
    done
    # Every load carries SHA256SUMS for all wheels: a missing or damaged
    # part shows here rather than as a broken install.
    sums="$(for d in $(loads); do cat "$d/SHA256SUMS" 2>/dev/null; done | sort -u)"
    for w in "$work"/*.whl; do
      want="$(awk -v n="$(basename "$w")" '$2 == n {print $1; exit}' <<<"$sums")"
      got="$(sha256sum "$w" | cut -d' ' -f1)"
      if [[ -n "$want" && "$want" != "$got" ]]; then
        echo "gpu-setup: $(basename "$w") has sha256 $got, want $want (a part is missing or damaged)" >&2
        exit 1
      fi
    done
    echo "gpu-setup: installing offline: $(cd "$work" && ls *.whl | tr '\n' ' ')"
    "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir "$work"/*.whl
  else
    echo "gpu-setup: installing mlx-cuda-13==$MLX_VERSION mlx==$MLX_VERSION from the index"
    "$python" -m pip install -q "mlx-cuda-13==$MLX_VERSION" "mlx==$MLX_VERSION"
  fi
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
