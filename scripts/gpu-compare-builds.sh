#!/usr/bin/env bash
# Times one bench command with several posttrainllm builds, alternating
# them over rounds in one call so that they share the machine's state:
# to find which change moved a step's time.
#
#   scripts/gpu-compare-builds.sh NAME... -- BENCH-ARGS...
#   ROUNDS=2 scripts/gpu-compare-builds.sh now 15a454e -- --preset huge --device gpu --micro-batch 4 \
#       --warmup-steps 20 --steps 50 --json
#
# NAME is a binary .gpu/bin/posttrainllm-NAME (built elsewhere from that
# commit: go build -o .gpu/bin/posttrainllm-NAME ./cmd/posttrainllm).
# Environment: ROUNDS (2), BINDIR (.gpu/bin). LD_LIBRARY_PATH must reach the
# CUDA libmlx.so (scripts/gpu-setup.sh libdir). MLX_PTX_CACHE_DIR is set to
# one folder for all builds, so that no row pays a compilation another did.
# OUTDIR ($OUT, else runs/gpu-compare-builds) gets every row's JSON and
# table.md: per row, bench's median ms per step waited for and pipelined.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
names=()
while [[ $# -gt 0 && "$1" != "--" ]]; do
  names+=("$1")
  shift
done
[[ $# -gt 0 ]] && shift
[[ ${#names[@]} -gt 0 && $# -gt 0 ]] || { echo "usage: scripts/gpu-compare-builds.sh NAME... -- BENCH-ARGS..." >&2; exit 2; }
out="${OUT:-runs/gpu-compare-builds}"
bindir="${BINDIR:-$root/.gpu/bin}"
ROUNDS="${ROUNDS:-2}"
mkdir -p "$out"
export MLX_PTX_CACHE_DIR="${MLX_PTX_CACHE_DIR:-$(mktemp -d)}"
table="$out/table.md"
printf '| round | build | ms/step waited (p10–p90) | pipelined | graph ops |\n|---|---|---:|---:|---:|\n' >"$table"
for r in $(seq "$ROUNDS"); do
  for n in "${names[@]}"; do
    f="$out/r$r-$n.json"
    if "$bindir/posttrainllm-$n" bench "$@" >"$f" 2>"$out/r$r-$n.log"; then
      python3 - "$f" "$r" "$n" <<'PY' | tee -a "$table"
import json, sys
j = json.load(open(sys.argv[1]))  # bench --json prints one indented object
print(f"| {sys.argv[2]} | {sys.argv[3]} | {j['ms_per_step_median']:.2f} ({j['ms_per_step_p10']:.2f}–{j['ms_per_step_p90']:.2f}) "
      f"| {j.get('ms_per_step_pipelined', 0):.2f} | {j.get('graph_ops', 0)} |")
PY
    else
      echo "| $r | $n | FAILED: $(tail -1 "$out/r$r-$n.log") | | |" | tee -a "$table"
    fi
  done
done
