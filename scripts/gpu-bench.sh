#!/usr/bin/env bash
# The GPU benchmark in one command, on a machine with a CUDA 13 GPU: installs
# MLX's CUDA backend (scripts/gpu-setup.sh), runs the GPU tests, measures the
# bf16 matmul peak, then trains the same configuration five ways
# (posttrainllm compiled and interpreted, MLX Python compiled, PyTorch eager
# and torch.compile) and writes one table.
#
#   scripts/gpu-bench.sh [OUTDIR]        # default $OUT, else runs/gpu-bench
#
# Environment: PRESET (huge), WARMUP (20 untimed steps), STEPS (50) and
# INTERP_STEPS (30: timed steps of the interpreted run), MICRO_BATCH (the
# posttrainllm rows' --micro-batch: default the preset's batch, as the peers
# run it; auto probes), ROWS (which rows,
# default all five: ptlm-compiled ptlm-interpreted mlx-python torch-eager
# torch-compile; ptlm-compiled@NAME and ptlm-interpreted@NAME add rows for
# another build, .gpu/bin/posttrainllm-NAME), TESTS=0 skips the GPU tests,
# RATIO_ROUNDS=N (default 0: off) adds ratio.md: posttrainllm compiled and
# interpreted alternated N times (bench --compare --rounds N, cosine, accum
# 4), the median of the per-round ratios with their range.
#
# posttrainllm and the GPU test binaries are built into .gpu/bin where Go is
# installed; on a machine without Go they must already be there
# (scripts/offline/). They are linked against mlx-cpu's libmlx.so;
# LD_LIBRARY_PATH points them at the CUDA wheel's libmlx.so, the same
# version and C++ API.
#
# OUTDIR receives table.md, log.txt and raw.tar.gz (every JSON result and log).
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
out="${1:-${OUT:-runs/gpu-bench}}"
PRESET="${PRESET:-huge}"
WARMUP="${WARMUP:-20}"
STEPS="${STEPS:-50}"
INTERP_STEPS="${INTERP_STEPS:-30}"
ROWS="${ROWS:-ptlm-compiled ptlm-interpreted mlx-python torch-eager torch-compile}"
TESTS="${TESTS:-1}"
mkdir -p "$out"
raw="$(mktemp -d)"
exec > >(tee -a "$out/log.txt") 2>&1

# NVLink multicast stays off (shared hosts); Python prints as it goes.
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

echo "== setup"
scripts/gpu-setup.sh || { echo "gpu-bench: setup failed"; exit 1; }
libdir="$(scripts/gpu-setup.sh libdir)"
export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
bin="$root/.gpu/bin/posttrainllm"
if command -v go >/dev/null; then # with Go, build what runs (incremental)
  make --no-print-directory build test-gpu-bin BIN="$bin" GPU_BIN=.gpu/bin ||
    { echo "gpu-bench: build failed"; exit 1; }
fi
[[ -x "$bin" ]] || { echo "gpu-bench: no $bin (install Go, or see scripts/offline/README.md)"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,power.limit --format=csv
python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.get_device_name())' || true
"$bin" version 2>/dev/null || true

status=0
if [[ "$TESTS" == 1 ]]; then
  echo "== GPU tests"
  for t in .gpu/bin/*-gpu.test; do
    pkg="$(basename "$t" -gpu.test)"
    if (cd "$pkg" && "../$t" -test.count=1 -test.run GPU -test.v) >"$raw/test-$pkg.log" 2>&1; then
      echo "PASS $pkg: $(grep -c '^--- PASS' "$raw/test-$pkg.log") tests"
    else
      echo "FAIL $pkg"; cat "$raw/test-$pkg.log"; status=1
    fi
  done
fi

echo "== bf16 matmul peak"
python3 bench/peers/matmul_peak.py | tee "$raw/peak.json"

# row LABEL FILE CMD...: runs one configuration, keeping its output; a row
# that succeeded goes into the table, a failed one is reported and left out.
row() {
  local label="$1" file="$2"
  shift 2
  echo "== $label"
  if "$@" >"$raw/$file.json" 2>"$raw/$file.log"; then
    python3 -c 'import json, sys; sys.path.insert(0, "bench/peers"); import table; print(json.dumps(table.last_json(sys.argv[1])))' "$raw/$file.json"
    table+=("$label=$raw/$file.json")
  else
    cat "$raw/$file.json" >>"$raw/$file.log"
    echo "gpu-bench: $label failed:"; tail -20 "$raw/$file.log"; status=1
  fi
}

# The posttrainllm rows run the preset's batch × accum as given, the peers'
# plan; MICRO_BATCH=auto lets the GPU probe fold accumulation instead.
micro="${MICRO_BATCH:-$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["batch"])' "presets/$PRESET.json")}"
ptlm() { "$bin" bench --preset "$PRESET" --device gpu --warmup-steps "$WARMUP" --micro-batch "$micro" --json "$@"; }
# ptlm_at NAME ...: the same with .gpu/bin/posttrainllm-NAME, another build
# (the code before a change) measured in the same run.
ptlm_at() { local b="$bin-$1"; shift; "$b" bench --preset "$PRESET" --device gpu --warmup-steps "$WARMUP" --json "$@"; }
peer() { python3 "bench/peers/$1" --preset "$PRESET" --warmup "$WARMUP" --steps "$STEPS" "${@:2}"; }
table=()
for r in $ROWS; do
  case "$r" in
    ptlm-compiled) row "posttrainllm compiled" "$r" ptlm --steps "$STEPS" --compile=true ;;
    ptlm-interpreted) row "posttrainllm interpreted" "$r" ptlm --steps "$INTERP_STEPS" --compile=false ;;
    mlx-python) row "MLX Python (mx.compile)" "$r" peer mlx_peer.py ;;
    torch-eager) row "PyTorch eager" "$r" peer torch_peer.py --profile-steps 3 ;;
    torch-compile) row "PyTorch torch.compile" "$r" peer torch_peer.py --compile --profile-steps 3 ;;
    ptlm-compiled@*) n="${r#*@}"; row "posttrainllm compiled ($n)" "$r" ptlm_at "$n" --steps "$STEPS" --compile=true ;;
    ptlm-interpreted@*) n="${r#*@}"; row "posttrainllm interpreted ($n)" "$r" ptlm_at "$n" --steps "$INTERP_STEPS" --compile=false ;;
    *) echo "gpu-bench: unknown row $r"; status=1 ;;
  esac
done

if [[ "${RATIO_ROUNDS:-0}" -gt 0 ]]; then
  echo "== compiled/interpreted, $RATIO_ROUNDS alternating rounds"
  "$bin" bench --preset "$PRESET" --device gpu --warmup-steps "$WARMUP" --steps "$INTERP_STEPS" \
    --compare --schedule cosine --accum 4 --rounds "$RATIO_ROUNDS" | tee "$out/ratio.md" || status=1
fi

echo "== table"
python3 bench/peers/table.py --peak "$raw/peak.json" --preset "$PRESET" --reference "posttrainllm compiled" \
  "${table[@]}" | tee "$out/table.md"
tar czf "$out/raw.tar.gz" -C "$raw" .
rm -rf "$raw"
exit "$status"
