#!/usr/bin/env bash
# Where the GPU step's time goes: runs after scripts/gpu-bench.sh (MLX's CUDA
# backend installed) and writes profile.md into OUTDIR.
#
#   scripts/gpu-profile.sh [OUTDIR]      # default $OUT, else runs/gpu-profile
#
# 1. Variants: posttrainllm compiled (and MLX Python) under MLX's CUDA-graph
#    settings (MLX_USE_CUDA_GRAPHS, MLX_MAX_OPS_PER_BUFFER,
#    MLX_MAX_MB_PER_BUFFER), and every extra binary .gpu/bin/posttrainllm-*
#    (experiments built by hand), each with its host and device time.
# 2. Kernels: Nsight Compute's per-kernel durations of one step of
#    posttrainllm compiled and of MLX Python (a 2-step run minus a 1-step
#    run), summarised by bench/peers/kernels.py.
#
# Environment: PRESET (huge), STEPS (30), NCU=0 skips part 2, VARIANTS=0
# skips part 1, NCU_MLX=0 profiles posttrainllm only, NCU_TIMEOUT (240 s
# per profiled run), PTLM_ENVS and MLX_ENVS
# (the settings tried, semicolon-separated; an empty item is the defaults).
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
out="${1:-${OUT:-runs/gpu-profile}}"
PRESET="${PRESET:-huge}"
STEPS="${STEPS:-30}"
NCU="${NCU:-1}"
NCU_MLX="${NCU_MLX:-1}"
VARIANTS="${VARIANTS:-1}"
NCU_TIMEOUT="${NCU_TIMEOUT:-240}"
# Semicolon-separated environment settings, one variant each ("" = defaults).
PTLM_ENVS="${PTLM_ENVS-;MLX_USE_CUDA_GRAPHS=0;MLX_MAX_OPS_PER_BUFFER=100;MLX_MAX_OPS_PER_BUFFER=400 MLX_MAX_MB_PER_BUFFER=4000}"
MLX_ENVS="${MLX_ENVS-;MLX_MAX_OPS_PER_BUFFER=400 MLX_MAX_MB_PER_BUFFER=4000}"
mkdir -p "$out"
raw="$(mktemp -d)"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LD_LIBRARY_PATH="$(scripts/gpu-setup.sh libdir)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
bin="$root/.gpu/bin/posttrainllm"  # absolute: ncu wants a path
md="$out/profile.md"
: >"$md"
# This build runs the preset's batch × accum as given, the MLX peer's plan,
# not the plan its GPU probe would choose (other builds may predate the flag).
plan=(--micro-batch "$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["batch"])' "presets/$PRESET.json")")

# variant LABEL ENV BIN|mlx: one short compiled run; appends a table row.
variant() {
  local label="$1" envs="$2" what="$3" f="$raw/variant-$RANDOM.json"
  if [[ "$what" == mlx ]]; then
    env $envs python3 bench/peers/mlx_peer.py --preset "$PRESET" --warmup 5 --steps "$STEPS" >"$f.out" 2>"$f.log"
  else
    local extra=()
    [[ "$what" == "$bin" ]] && extra=("${plan[@]}")
    env $envs "$what" bench --preset "$PRESET" --device gpu --warmup-steps 5 --steps "$STEPS" --compile=true "${extra[@]}" --json >"$f.out" 2>"$f.log"
  fi
  if python3 - "$label" "$envs" "$f.out" >>"$md" <<'PY'
import sys
sys.path.insert(0, "bench/peers")
import table
label, envs, f = sys.argv[1:]
r = table.last_json(f)
h, d = r.get("host_ms_per_step"), r.get("device_ms_per_step")
hd = f"{h:.2f} / {d:.2f}" if h is not None else "–"
print(f"| {label} | `{envs or 'defaults'}` | {r['ms_per_step_median']:.2f} | {r['steps_per_s']:.2f} | {hd} | "
      f"{r['peak_memory_bytes'] / 2**20:,.0f} | {r['loss_first']:.3f} → {r['loss_last']:.3f} |")
PY
  then
    tail -1 "$md"
  else
    echo "| $label | \`${envs:-defaults}\` | failed: $(cat "$f.out" "$f.log" | tail -1 | tr '|' ' ') | | | | |" | tee -a "$md"
  fi
}

if [[ "$VARIANTS" == 1 ]]; then
  echo "== variants"
  {
    echo "## Variants ($PRESET, $STEPS timed steps each, one after another)"
    echo
    echo "| run | environment | ms/step | step/s | host / device ms | peak MiB | loss first → last |"
    echo "|---|---|---|---|---|---|---|"
  } >>"$md"
  IFS=';' read -ra penvs <<<"$PTLM_ENVS"
  for envs in "${penvs[@]}"; do
    variant "posttrainllm compiled" "$envs" "$bin"
  done
  for b in "$root"/.gpu/bin/posttrainllm-*; do
    [[ -x "$b" && "$b" != *.gz ]] || continue
    variant "$(basename "$b")" "" "$b"
  done
  IFS=';' read -ra menvs <<<"$MLX_ENVS"
  for envs in "${menvs[@]}"; do
    variant "MLX Python compiled" "$envs" mlx
  done
  echo >>"$md"
fi

# ncu_run NAME CMD...: Nsight Compute's kernel durations of CMD.
ncu_run() {
  local name="$1"
  shift
  timeout "$NCU_TIMEOUT" ncu --clock-control none --metrics gpu__time_duration.sum --csv --page raw \
    --log-file "$raw/$name.csv" "$@" >"$raw/$name.out" 2>&1 || echo "gpu-profile: ncu $name: exit $? ($(tail -1 "$raw/$name.out"))"
}

if [[ "$NCU" == 1 ]] && command -v ncu >/dev/null; then
  echo "== ncu"
  echo "## Kernels per step (Nsight Compute)" >>"$md"
  echo >>"$md"
  for n in 1 2; do
    ncu_run "ptlm-$n" "$bin" bench --preset "$PRESET" --device gpu --warmup-steps 0 --steps "$n" --compile=true "${plan[@]}" --json
  done
  python3 bench/peers/kernels.py --label "posttrainllm compiled" "$raw/ptlm-1.csv" "$raw/ptlm-2.csv" >>"$md" 2>&1
  if [[ "$NCU_MLX" == 1 ]]; then
    for n in 1 2; do
      ncu_run "mlx-$n" python3 bench/peers/mlx_peer.py --preset "$PRESET" --warmup 0 --steps "$n"
    done
    python3 bench/peers/kernels.py --label "MLX Python compiled" "$raw/mlx-1.csv" "$raw/mlx-2.csv" >>"$md" 2>&1
  fi
fi
cat "$md"
tar czf "$out/profile-raw.tar.gz" -C "$raw" .
rm -rf "$raw"
