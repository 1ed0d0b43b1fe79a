#!/usr/bin/env bash
# Points the project-local mlx-cpu install at OpenBLAS.
#
# The mlx-cpu wheel bundles the reference (netlib) BLAS, whose sgemm runs at
# a few GFLOP/s: on a 2-core machine it took 73% of a tiny training step
# (perf, docs/performance/cpu.md). PyPI's scipy-openblas32 wheel carries a
# current OpenBLAS, but with every symbol prefixed "scipy_". This script
# installs that wheel next to MLX (.deps/blas) and replaces the wheel's
# libblas with a shim of the same soname whose every exported function is a
# one-instruction jump to the scipy_-prefixed OpenBLAS function, so libmlx's
# cblas_sgemm and the bundled LAPACK's Fortran BLAS calls run in OpenBLAS.
#
# Idempotent. MLX_BLAS=reference skips it (and restores the wheel's BLAS).
set -euo pipefail

OPENBLAS_VERSION="${OPENBLAS_VERSION:-0.3.34.481.3}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mlx="${MLX_PREFIX:-$root/.deps/mlx}"
blas_prefix="${BLAS_PREFIX:-$root/.deps/blas}"
libs="$mlx/mlx_cpu.libs"
stamp="$mlx/.blas"
want="scipy-openblas32==${OPENBLAS_VERSION}"

shopt -s nullglob
wheel_blas=()
for f in "$libs"/libblas-*.so*; do
  [[ "$f" == *.reference ]] || wheel_blas+=("$f")
done
if [[ ${#wheel_blas[@]} -ne 1 ]]; then
  echo "install-blas: expected one libblas-*.so in $libs, found ${#wheel_blas[@]}; keeping MLX's BLAS" >&2
  exit 0
fi
target="${wheel_blas[0]}"
orig="$target.reference"

if [[ "${MLX_BLAS:-openblas}" == "reference" ]]; then
  if [[ -f "$orig" ]]; then mv -f "$orig" "$target"; fi
  rm -f "$stamp"
  echo "BLAS: using the reference BLAS bundled with mlx-cpu"
  exit 0
fi
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  echo "BLAS: $want already linked into $libs"
  exit 0
fi
for tool in cc nm; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "install-blas: '$tool' not found; keeping the reference BLAS (slow matmuls on CPU)" >&2
    exit 0
  fi
done

python="$(command -v python3 || command -v python)"
if [[ ! -f "$blas_prefix/.installed" || "$(cat "$blas_prefix/.installed")" != "$want" ]]; then
  echo "BLAS: installing $want into $blas_prefix"
  rm -rf "$blas_prefix"
  PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore \
    "$python" -m pip install --quiet --no-deps --no-compile --target "$blas_prefix" "$want"
  echo "$want" >"$blas_prefix/.installed"
fi
openblas_dir="$blas_prefix/scipy_openblas32/lib"
openblas="$openblas_dir/libscipy_openblas.so"
if [[ ! -f "$openblas" ]]; then
  echo "install-blas: $want carries no $openblas; keeping the reference BLAS" >&2
  exit 0
fi

# Keep the wheel's library: its exported symbols define the shim.
[[ -f "$orig" ]] || cp "$target" "$orig"
soname="$(basename "$target")"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# The shim exports what libmlx and the wheel's other libraries (LAPACK)
# import from the BLAS: netlib's internal CBLAS helpers (sdotsub_, …) are
# imported by nobody.
nm -D --defined-only "$orig" | awk '$2 == "T" {print $3}' | sort -u >"$work/exported"
for lib in "$mlx/mlx/lib/libmlx.so" "$libs"/*.so*; do
  [[ "$lib" == "$target" || "$lib" == "$orig" ]] && continue
  nm -D --undefined-only "$lib" | awk '{print $NF}' | sed 's/@.*//'
done | sort -u >"$work/imported"
comm -12 "$work/exported" "$work/imported" >"$work/want"
nm -D --defined-only "$openblas" | awk '$2 == "T" {print $3}' | sed -n 's/^scipy_//p' | sort -u >"$work/have"
missing="$(comm -23 "$work/want" "$work/have" | tr '\n' ' ')"
if [[ -n "$missing" ]]; then
  echo "install-blas: OpenBLAS lacks $missing; keeping the reference BLAS" >&2
  exit 0
fi
{
  echo "  .text"
  while read -r sym; do
    printf '  .globl %s\n  .type %s, @function\n%s:\n  jmp scipy_%s@PLT\n' "$sym" "$sym" "$sym" "$sym"
  done <"$work/want"
  echo '  .section .note.GNU-stack,"",@progbits'
} >"$work/shim.S"
# One OpenBLAS thread unless OPENBLAS_NUM_THREADS says otherwise: MLX runs
# its own CPU threads, and OpenBLAS workers spinning beside them made a
# tiny step 2.7x slower on two cores.
cat >"$work/threads.c" <<'C'
#include <stdlib.h>
void scipy_openblas_set_num_threads(int);
__attribute__((constructor)) static void ptlm_blas_threads(void) {
  if (getenv("OPENBLAS_NUM_THREADS") == NULL) scipy_openblas_set_num_threads(1);
}
C
cc -shared -fPIC -O2 -o "$work/$soname" "$work/shim.S" "$work/threads.c" -Wl,-soname,"$soname" \
  -L"$openblas_dir" -l:libscipy_openblas.so -Wl,-rpath,"$openblas_dir"
mv -f "$work/$soname" "$target"
echo "$want" >"$stamp"
echo "BLAS: $(wc -l <"$work/want") BLAS functions of $soname now run in OpenBLAS ($want)"
