#!/usr/bin/env bash
# MLX's CPU backend compiles its fused kernels at run time with
# `g++ -std=c++17 -O3 -Wall -fPIC -shared` (the command is built into
# libmlx.so): no -march, so every fma in exp and erf is a call into libm.
# This script measures what the kernels would gain from -march=native: it
# runs posttrainllm bench and the MLX C++ peer (make build peers) in
# alternating rounds, each once as installed and once with a g++ on PATH
# that adds -march=native, each with a kernel cache of its own (TMPDIR),
# and prints CPU ms per step (process CPU time over the timed steps).
#
#   scripts/cpu-jit-flags.sh [preset] [rounds]     # default: tiny 5
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:-tiny}
rounds=${2:-5}
for f in bin/posttrainllm bin/cpp_peer; do
	[ -x "$f" ] || { echo "cpu-jit-flags.sh: $f is missing; run make build peers" >&2; exit 1; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/native-bin" "$work/cache-default" "$work/cache-native"
gxx=$(command -v g++)
printf '#!/bin/sh\nexec %s -march=native "$@"\n' "$gxx" >"$work/native-bin/g++"
chmod +x "$work/native-bin/g++"
# The C++ peer's flags for the preset's model (bench/peers/compare.py does the same).
peer_flags=$(python3 - "$preset" <<'PY'
import json, sys
m = json.load(open(f"presets/{sys.argv[1]}.json"))["model"]
print(f"--vocab {m['vocab_size']} --d-model {m['d_model']} --layers {m['layers']} --heads {m['heads']} "
      f"--context {m['context']} --tied {int(m['tied_embeddings'])}")
PY
)
cpu_ms() { python3 -c 'import json,sys; s=sys.stdin.read(); print("%.1f" % json.JSONDecoder().raw_decode(s[s.find("{"):])[0]["cpu_ms_per_step"])'; }
echo "preset $preset, gelu exact, CPU ms per step; load: $(uptime | sed 's/.*load average: //')"
printf '%-6s %-14s %10s %10s %8s\n' round impl default native ratio
for r in $(seq 1 "$rounds"); do
	for impl in posttrainllm mlx-cpp; do
		declare -A ms=()
		for v in default native; do
			path=$PATH
			[ "$v" = native ] && path="$work/native-bin:$PATH"
			if [ "$impl" = posttrainllm ]; then
				ms[$v]=$(PATH=$path TMPDIR="$work/cache-$v" bin/posttrainllm bench --preset "$preset" --gelu exact --steps 30 --json | cpu_ms)
			else
				ms[$v]=$(PATH=$path TMPDIR="$work/cache-$v" bin/cpp_peer $peer_flags --steps 30 | cpu_ms)
			fi
		done
		printf '%-6s %-14s %10s %10s %8.2f\n' "$r" "$impl" "${ms[default]}" "${ms[native]}" "$(python3 -c "print(${ms[native]}/${ms[default]})")"
	done
done
echo "load after: $(uptime | sed 's/.*load average: //')"
