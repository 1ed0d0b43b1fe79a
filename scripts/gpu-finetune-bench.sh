#!/usr/bin/env bash
# The fine-tune row of the GPU report, on a machine with a CUDA 13 GPU:
# installs MLX's CUDA backend (scripts/gpu-setup.sh), builds posttrainllm,
# and times the fine-tune step of a preset (default huge) with LoRA, DoRA
# and all weights trainable, compiled and interpreted, alternated ROUNDS
# times in one process (bench --finetune … --compare --rounds N).
#
#   scripts/gpu-finetune-bench.sh [OUTDIR]     # default $OUT, else runs/gpu-finetune
#
# Environment: PRESET (huge), METHODS (lora,dora,full), RANK (8), TARGETS
# (all), WARMUP (20), STEPS (50), ROUNDS (3).
#
# OUTDIR receives table.txt (the bench tables: every cell, then the
# interpreted/compiled and LoRA/DoRA-vs-full ratios), results.json and
# log.txt.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
out="${1:-${OUT:-runs/gpu-finetune}}"
PRESET="${PRESET:-huge}"
METHODS="${METHODS:-lora,dora,full}"
RANK="${RANK:-8}"
TARGETS="${TARGETS:-all}"
WARMUP="${WARMUP:-20}"
STEPS="${STEPS:-50}"
ROUNDS="${ROUNDS:-3}"
mkdir -p "$out"
exec > >(tee -a "$out/log.txt") 2>&1
export NCCL_NVLS_ENABLE=0

echo "== setup"
scripts/gpu-setup.sh || { echo "gpu-finetune-bench: setup failed"; exit 1; }
libdir="$(scripts/gpu-setup.sh libdir)"
export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
bin="$root/.gpu/bin/posttrainllm"
if command -v go >/dev/null; then
  make --no-print-directory build BIN="$bin" || { echo "gpu-finetune-bench: build failed"; exit 1; }
fi
[[ -x "$bin" ]] || { echo "gpu-finetune-bench: no $bin (install Go, or see scripts/offline/README.md)"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv

args=(bench --preset "$PRESET" --device gpu --finetune "$METHODS" --rank "$RANK" --alpha "$((2 * RANK))"
  --targets "$TARGETS" --compare --rounds "$ROUNDS" --warmup-steps "$WARMUP" --steps "$STEPS")
echo "== posttrainllm ${args[*]}"
"$bin" "${args[@]}" | tee "$out/table.txt" || exit 1
"$bin" "${args[@]}" --json >"$out/results.json" 2>/dev/null || echo "gpu-finetune-bench: JSON run failed"
