#!/usr/bin/env bash
# The micro-batch plan on a GPU, in one command: for the huge preset, the
# default plan (--micro-batch auto: the probe picks the largest micro-batch
# that fits the memory budget) against the preset's forced batch 4 × accum 4,
# compiled and interpreted, beside torch.compile at both shapes, alternating
# ROUNDS times; then the peak memory of mega (batch 8 × accum 4) and behemoth
# (batch 8 × accum 8) at their forced plans and the plan auto picks for them.
#
#   scripts/gpu-plan.sh [OUTDIR]         # default $OUT, else runs/gpu-plan
#
# Environment: ROUNDS (2), WARMUP (20), STEPS (50), INTERP_STEPS (30),
# TORCH=0 leaves out the torch.compile rows, BIG=0 the mega/behemoth rows,
# COMPARE=NAME adds, after each compiled huge row, the same row run by
# .gpu/bin/posttrainllm-NAME (another build, e.g. of the commit before a
# change), so two builds alternate in one call.
# MLX must be installed (scripts/gpu-setup.sh, or scripts/offline/setup.sh)
# and posttrainllm built into .gpu/bin. OUTDIR receives results.jsonl (one
# labelled JSON result per line), table.md and log.txt. The table gives each
# row's median ms per step waited for and, where the build reports it, per
# step pipelined as training runs (bench's ms_per_step_pipelined).
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
out="${1:-${OUT:-runs/gpu-plan}}"
ROUNDS="${ROUNDS:-2}" WARMUP="${WARMUP:-20}" STEPS="${STEPS:-50}" INTERP_STEPS="${INTERP_STEPS:-30}"
mkdir -p "$out"
exec > >(tee -a "$out/log.txt") 2>&1
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
libdir="$(scripts/gpu-setup.sh libdir)" || { echo "gpu-plan: MLX's CUDA backend is not installed"; exit 1; }
export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
bin="$root/.gpu/bin/posttrainllm"
[[ -x "$bin" ]] || { echo "gpu-plan: no $bin"; exit 1; }
results="$out/results.jsonl"
: >"$results"
status=0

# row LABEL CMD...: runs one configuration and appends {"label":…, …its JSON…}.
row() {
  local label="$1" tmp
  shift
  tmp="$(mktemp)"
  echo "== $label"
  if "$@" >"$tmp" 2>"$tmp.err"; then
    python3 - "$label" "$tmp" >>"$results" <<'PY'
import json, sys
sys.path.insert(0, "bench/peers")
import table
d = table.last_json(sys.argv[2])
d["label"] = sys.argv[1]
print(json.dumps(d))
PY
    tail -1 "$results" | cut -c1-300
  else
    echo "gpu-plan: $label failed:"; tail -20 "$tmp.err" "$tmp"; status=1
  fi
  rm -f "$tmp" "$tmp.err"
}
ptlm_with() { local b="$1"; shift; "$b" bench --device gpu --warmup-steps "$WARMUP" --json "$@"; }
ptlm() { ptlm_with "$bin" "$@"; }
# compiled LABEL ARGS...: a compiled huge row, and the COMPARE build's.
compiled() {
  local label="$1"; shift
  row "$label" ptlm "$@" --compile=true
  if [[ -n "${COMPARE:-}" ]]; then
    row "$label ($COMPARE)" ptlm_with "$root/.gpu/bin/posttrainllm-$COMPARE" "$@" --compile=true
  fi
}
torch() { python3 bench/peers/torch_peer.py --warmup "$WARMUP" --steps "$STEPS" --compile "$@"; }

for r in $(seq "$ROUNDS"); do
  compiled "huge auto compiled #$r" --preset huge --micro-batch auto --steps "$STEPS"
  compiled "huge 4x4 compiled #$r" --preset huge --micro-batch 4 --steps "$STEPS"
  row "huge auto interpreted #$r" ptlm --preset huge --micro-batch auto --steps "$INTERP_STEPS" --compile=false
  row "huge 4x4 interpreted #$r" ptlm --preset huge --micro-batch 4 --steps "$INTERP_STEPS" --compile=false
  if [[ "${TORCH:-1}" == 1 ]]; then
    row "huge torch.compile 16x1 #$r" torch --preset huge --batch 16 --accum 1
    row "huge torch.compile 4x4 #$r" torch --preset huge
  fi
done
if [[ "${BIG:-1}" == 1 ]]; then
  row "mega 8x4 compiled" ptlm --preset mega --micro-batch 8 --steps 20 --compile=true
  row "mega auto compiled" ptlm --preset mega --micro-batch auto --steps 20 --compile=true
  row "behemoth 8x8 compiled" ptlm --preset behemoth --micro-batch 8 --steps 10 --compile=true
  row "behemoth auto compiled" ptlm --preset behemoth --micro-batch auto --steps 10 --compile=true
fi

python3 - "$results" <<'PY' | tee "$out/table.md"
import json, sys
print("| run | plan (micro-batch × steps) | ms/step median (p10–p90) | pipelined ms/step | tokens/s | peak memory GB (pipelined) | traces | graph ops | host ms |")
print("|---|---|---|---|---|---|---|---|---|")
for line in open(sys.argv[1]):
    d = json.loads(line)
    plan = f'{d.get("micro_batch", d.get("batch", "?"))} × {d.get("accum_steps", d.get("accum", "?"))}'
    if d.get("plan"):
        plan += f' ({d["plan"]})'
    ms = d.get("ms_per_step_median")
    rng = f'{d.get("ms_per_step_p10", 0):.1f}–{d.get("ms_per_step_p90", 0):.1f}'
    pipe = d.get("ms_per_step_pipelined")
    pipe = f"{pipe:.2f}" if pipe else "–"
    peak, peak_pipe = d.get("peak_memory_bytes"), d.get("peak_memory_bytes_pipelined")
    mem = f"{peak / 1e9:.2f}" if peak else "–"
    if peak_pipe:
        mem += f" ({peak_pipe / 1e9:.2f})"
    host = d.get("host_ms_per_step")
    host = f"{host:.2f}" if host is not None else "–"
    print(f'| {d["label"]} | {plan} | {ms:.2f} ({rng}) | {pipe} | {d.get("tokens_per_s", 0):,.0f} | {mem} | '
          f'{d.get("traces", "")} | {d.get("graph_ops", "–")} | {host} |')
PY
exit "$status"
