#!/usr/bin/env bash
# How long posttrainllm takes to start on a GPU, cold (empty kernel and
# plan caches, as on a fresh machine) and warm (the caches the cold run
# filled), each in a fresh process:
#
#   train --preset tiny --device gpu --steps 300    cold, warm, warm with --plan-cache off
#   sample --from SHAPE --device gpu --tokens 16    cold, warm (with SHAPE set)
#
#   scripts/gpu-startup.sh CORPUS [OUTDIR]
#
# Environment: BIN (posttrainllm; default .gpu/bin/posttrainllm), SHAPE
# (a Hugging Face folder to sample from, e.g. scripts/shape-folder.py
# smollm2-135m; unset skips the sample rows), PRESET (tiny), STEPS (300),
# DEVICE (gpu), CACHE (the folder of the rows' caches and run, kept; default
# a temporary one, removed).
# LD_LIBRARY_PATH must reach the CUDA libmlx.so (scripts/gpu-setup.sh
# libdir). Each row runs with an XDG_CACHE_HOME under CACHE (the train rows
# one, the sample rows another) and MLX_PTX_CACHE_DIR unset, so the kernels go where posttrainllm
# puts them by default. OUTDIR (default $OUT, else runs/gpu-startup) gets
# table.md and each row's log.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
corpus="${1:?usage: scripts/gpu-startup.sh CORPUS [OUTDIR]}"
out="${2:-${OUT:-runs/gpu-startup}}"
bin="${BIN:-$root/.gpu/bin/posttrainllm}"
PRESET="${PRESET:-tiny}"
STEPS="${STEPS:-300}"
DEVICE="${DEVICE:-gpu}"
mkdir -p "$out"
if [[ -n "${CACHE:-}" ]]; then # kept for the caller
  work="$CACHE"
  mkdir -p "$work"
else
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
fi
unset MLX_PTX_CACHE_DIR
table="$out/table.md"
printf '| row | wall s | start-up (the run'"'"'s own line) |\n|---|---:|---|\n' >"$table"

# row NAME CACHE CMD...: runs CMD with XDG_CACHE_HOME=$work/CACHE, timing
# the whole process; the log keeps its output.
row() {
  local name="$1" cache="$2"
  shift 2
  local log="$out/$name.log" t0 t1 status
  t0=$(date +%s.%N)
  XDG_CACHE_HOME="$work/$cache" "$@" >"$log" 2>&1
  status=$?
  t1=$(date +%s.%N)
  local wall startup
  wall=$(python3 -c "print(f'{$t1 - $t0:.1f}')")
  startup=$(grep -m1 '^start-up:' "$log" | sed 's/^start-up: //')
  [[ $status == 0 ]] || startup="FAILED (exit $status): $(tail -1 "$log")"
  echo "| $name | $wall | ${startup:--} |" | tee -a "$table"
}

train() {
  "$bin" train --preset "$PRESET" --device "$DEVICE" --steps "$STEPS" --corpus "$corpus" \
    --out "$work/run" --overwrite --no-progress "$@"
}
row train-cold c1 train
row train-warm c1 train
row train-warm-plan-cache-off c1 train --plan-cache off
if [[ -n "${SHAPE:-}" ]]; then
  sample() { "$bin" sample --from "$SHAPE" --device "$DEVICE" --prompt "The capital of France is" --tokens 16 --temperature 0; }
  row sample-cold c2 sample
  row sample-warm c2 sample
fi
echo "kernel cache after the train rows: $(find "$work/c1" -name '*.ptx' | wc -l) kernels ($(find "$work/c1" -name 'custom_kernel_*.ptx' | wc -l) of them custom kernels), $(du -sh "$work/c1" | cut -f1)" | tee -a "$table"
