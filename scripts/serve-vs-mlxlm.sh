#!/usr/bin/env bash
# posttrainllm serve beside mlx_lm.server on the same model folder and
# machine, alternating rounds: each round starts one server, runs
# scripts/serve-bench.py against it (streamed greedy completions through
# the OpenAI API at each count of concurrent clients), and stops it.
#
#   scripts/serve-vs-mlxlm.sh MODEL_FOLDER [OUTDIR]
#
# Environment: CLIENTS (1,8,32), TOKENS (128), PER_CLIENT (2), ROUNDS (2),
# DEVICE (cpu, or gpu), DTYPE (posttrainllm's --dtype: float32 by default;
# bfloat16 computes a bfloat16 folder as mlx_lm.server does), MAX_BATCH (posttrainllm's --max-batch, 32; mlx-lm's
# --decode-concurrency takes the same), BIN, PY (the mlx-lm Python),
# BENCH_PY (python3). OUTDIR
# (default $OUT, else runs/serve-vs-mlxlm) receives rows.jsonl, table.md and
# the servers' logs.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
model="$(cd "${1:?usage: scripts/serve-vs-mlxlm.sh MODEL_FOLDER [OUTDIR]}" && pwd)"
out="${2:-${OUT:-runs/serve-vs-mlxlm}}"
CLIENTS="${CLIENTS:-1,8,32}" TOKENS="${TOKENS:-128}" PER_CLIENT="${PER_CLIENT:-2}" ROUNDS="${ROUNDS:-2}"
DEVICE="${DEVICE:-cpu}" MAX_BATCH="${MAX_BATCH:-32}"
BIN="${BIN:-$root/bin/posttrainllm}" PY="${PY:-$root/.deps/mlxlm/bin/python}" BENCH_PY="${BENCH_PY:-python3}"
mkdir -p "$out"
rows="$out/rows.jsonl"
: >"$rows"
port=18931
preload=""
if [[ "$DEVICE" == cpu && "$(uname -s)" == Linux ]]; then
  preload=$(ls "$root"/.deps/mlx/mlx_cpu.libs/libblas-*.so.* 2>/dev/null | grep -v '\.reference$' | head -n 1 || true)
fi
wait_up() { # waits for the server on $port to answer /v1/models
  for _ in $(seq 1 300); do
    "$BENCH_PY" -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/v1/models')" >/dev/null 2>&1 && return 0
    sleep 1
  done
  echo "server on port $port did not come up" >&2
  return 1
}
bench() { # tool model-name
  "$BENCH_PY" "$root/scripts/serve-bench.py" "http://127.0.0.1:$port" "$2" --tokens "$TOKENS" --clients "$CLIENTS" --per-client "$PER_CLIENT" --json |
    "$BENCH_PY" -c 'import json,sys; [print(json.dumps(dict(json.loads(l), tool="'"$1"'", round='"$r"'))) for l in sys.stdin]' >>"$rows"
}
for r in $(seq 1 "$ROUNDS"); do
  echo "== round $r: posttrainllm serve" >&2
  "$BIN" serve --from "$model" --model bench --device "$DEVICE" ${DTYPE:+--dtype "$DTYPE"} --addr "127.0.0.1:$port" --max-batch "$MAX_BATCH" >"$out/posttrainllm-$r.log" 2>&1 &
  pid=$!
  wait_up && bench posttrainllm bench
  kill -INT "$pid"; wait "$pid" || true
  echo "== round $r: mlx_lm.server" >&2
  LD_PRELOAD="$preload" "$PY" -m mlx_lm server --model "$model" --port "$port" --decode-concurrency "$MAX_BATCH" >"$out/mlxlm-$r.log" 2>&1 &
  pid=$!
  wait_up && bench mlx-lm "$model"
  kill "$pid"; wait "$pid" || true
done
"$BENCH_PY" - "$rows" >"$out/table.md" <<'PYEOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
clients = sorted({r["clients"] for r in rows})
med = lambda tool, c, f: statistics.median(r[f] for r in rows if r["tool"] == tool and r["clients"] == c)
failed = lambda tool, c: sum(r.get("failed", 0) for r in rows if r["tool"] == tool and r["clients"] == c)
print("| clients | posttrainllm tok/s | mlx_lm.server tok/s | ratio | posttrainllm TTFT ms | mlx_lm.server TTFT ms | failed requests (posttrainllm, mlx-lm) |")
print("|---:|---:|---:|---:|---:|---:|---|")
for c in clients:
    p, m = med("posttrainllm", c, "tokens_per_s"), med("mlx-lm", c, "tokens_per_s")
    print("| %d | %.1f | %.1f | %.2f× | %.0f | %.0f | %d, %d |" % (c, p, m, p / m, med("posttrainllm", c, "ttft_ms"), med("mlx-lm", c, "ttft_ms"),
                                                  failed("posttrainllm", c), failed("mlx-lm", c)))
PYEOF
cat "$out/table.md"
