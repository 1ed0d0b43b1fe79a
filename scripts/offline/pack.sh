#!/usr/bin/env bash
# Packs, on a machine with Go and a package registry, what a CUDA machine
# without either needs to run posttrainllm's GPU tests and benchmark: the
# mlx-cuda-13 and mlx wheels (CPython 3.12, manylinux x86-64), the
# posttrainllm binary and the GPU test binaries, cut into loads of at most
# LOAD_MB megabytes each under .gpu/load1, .gpu/load2, ... (a wheel larger
# than a load is split into NAME.whl.partNN files), for transfers limited in
# size. scripts/offline/setup.sh joins and installs them on the other side.
#
#   scripts/offline/pack.sh         # LOAD_MB=60 by default
#
# .gpu/ is git-ignored. The binaries link libmlx.so dynamically; on the GPU
# machine LD_LIBRARY_PATH points them at the CUDA wheel's libmlx.so (same
# version, same C++ API as the mlx-cpu one they were linked against here).
set -euo pipefail

MLX_VERSION="${MLX_VERSION:-0.32.4}"
LOAD_MB="${LOAD_MB:-60}"
GO="${GO:-go}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
mkdir -p .gpu/wheels .gpu/bin

want=("mlx_cuda_13-$MLX_VERSION-" "mlx-$MLX_VERSION-cp312-")
for w in "${want[@]}"; do
  if ! ls .gpu/wheels/"$w"*.whl >/dev/null 2>&1; then
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_35_x86_64 -d .gpu/wheels "mlx-cuda-13==$MLX_VERSION" "mlx==$MLX_VERSION"
    break
  fi
done
for w in "${want[@]}"; do
  ls .gpu/wheels/"$w"*.whl >/dev/null 2>&1 || { echo "pack: no wheel $w* after pip download" >&2; exit 1; }
done

# Stripped binaries (-s drops the symbol table and DWARF), gzipped. With
# NO_BUILD=1 the binaries already in .gpu/bin (experiments built by hand,
# posttrainllm-* beside posttrainllm) are packed as they are.
if [[ "${NO_BUILD:-0}" != 1 ]]; then
  make --no-print-directory deps GO="$GO" >/dev/null
  # cgo finds MLX in .deps through pkg-config, as under make.
  export PKG_CONFIG_PATH="$root/.deps/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
  "$GO" build -trimpath -ldflags=-s -o .gpu/bin/posttrainllm ./cmd/posttrainllm
  GOFLAGS="-trimpath -ldflags=-s" make --no-print-directory test-gpu-bin GPU_BIN=.gpu/bin
fi
rm -f .gpu/bin/*.gz
for b in .gpu/bin/*; do
  [[ -x "$b" && "$b" != *.gz ]] && gzip -9 -c "$b" >"$b.gz"
done

python3 - "$LOAD_MB" <<'PY'
import glob, hashlib, os, shutil, sys

cap = int(sys.argv[1]) * 1000 * 1000
for d in glob.glob(".gpu/load*"):
    shutil.rmtree(d)
wheels = sorted(glob.glob(".gpu/wheels/*.whl"), key=os.path.getsize, reverse=True)
sums = "".join(f"{hashlib.sha256(open(w, 'rb').read()).hexdigest()}  {os.path.basename(w)}\n" for w in wheels)
items = []  # (name, source, offset, size)
for w in wheels:
    size = os.path.getsize(w)
    if size <= cap:
        items.append((os.path.basename(w), w, 0, size))
        continue
    for i, off in enumerate(range(0, size, cap)):
        items.append((f"{os.path.basename(w)}.part{i:02d}", w, off, min(cap, size - off)))
for b in sorted(glob.glob(".gpu/bin/*.gz")):
    items.append((os.path.basename(b), b, 0, os.path.getsize(b)))
loads = []  # first fit, in order
for it in items:
    for ld in loads:
        if sum(x[3] for x in ld) + it[3] <= cap:
            ld.append(it)
            break
    else:
        loads.append([it])
for n, ld in enumerate(loads, 1):
    d = f".gpu/load{n}"
    os.makedirs(d)
    with open(f"{d}/SHA256SUMS", "w") as f:
        f.write(sums)
    for name, src, off, size in ld:
        with open(src, "rb") as fi, open(f"{d}/{name}", "wb") as fo:
            fi.seek(off)
            fo.write(fi.read(size))
    total = sum(x[3] for x in ld)
    print(f"pack: {d}: {total / 1e6:.1f} MB: " + ", ".join(x[0] for x in ld))
PY
