#!/usr/bin/env bash
# Generation beside mlx-lm on the same model folder and machine, alternating
# rounds: posttrainllm bench --generate (the one-sequence decoder and the
# batched engine) and scripts/mlxlm/generate_bench.py (mlx-lm's
# stream_generate and batch_generate), each a fresh process with its own
# untimed warm-up pass, the same prompt length, budget and stream counts.
#
#   scripts/generate-vs-mlxlm.sh MODEL_FOLDER [OUTDIR]
#
# Environment: STREAMS (1,8,32), PROMPT (128 tokens), GEN (128 tokens),
# ROUNDS (2), DEVICE (cpu; gpu on a CUDA machine with mlx-cuda-13 set up
# by scripts/gpu-setup.sh), DTYPE (posttrainllm's --dtype: float32 by
# default; bfloat16 computes a bfloat16 folder as mlx-lm does), BIN (bin/posttrainllm), PY (the mlx-lm
# Python: .deps/mlxlm/bin/python). On Linux's CPU mlx-lm runs with
# posttrainllm's OpenBLAS preloaded, so both use the same BLAS.
# OUTDIR (default $OUT, else runs/generate-vs-mlxlm) receives rows.jsonl
# and table.md: the median over rounds of each row, and the ratio of
# posttrainllm's engine to mlx-lm's batch_generate at each stream count.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
model="${1:?usage: scripts/generate-vs-mlxlm.sh MODEL_FOLDER [OUTDIR]}"
out="${2:-${OUT:-runs/generate-vs-mlxlm}}"
STREAMS="${STREAMS:-1,8,32}" PROMPT="${PROMPT:-128}" GEN="${GEN:-128}" ROUNDS="${ROUNDS:-2}" DEVICE="${DEVICE:-cpu}"
BIN="${BIN:-$root/bin/posttrainllm}" PY="${PY:-$root/.deps/mlxlm/bin/python}"
mkdir -p "$out"
rows="$out/rows.jsonl"
: >"$rows"
preload=""
if [[ "$DEVICE" == cpu && "$(uname -s)" == Linux ]]; then
  preload=$(ls "$root"/.deps/mlx/mlx_cpu.libs/libblas-*.so.* 2>/dev/null | grep -v '\.reference$' | head -n 1 || true)
fi
for r in $(seq 1 "$ROUNDS"); do
  echo "== round $r: posttrainllm" >&2
  "$BIN" bench --generate "$model" --device "$DEVICE" ${DTYPE:+--dtype "$DTYPE"} --streams "$STREAMS" --prompt-tokens "$PROMPT" --gen-tokens "$GEN" --json |
    "$PY" -c 'import json,sys; [print(json.dumps(dict(r, tool="posttrainllm", round='"$r"'))) for r in json.load(sys.stdin)]' >>"$rows"
  echo "== round $r: mlx-lm" >&2
  LD_PRELOAD="$preload" "$PY" "$root/scripts/mlxlm/generate_bench.py" "$model" --streams "$STREAMS" \
    --prompt-tokens "$PROMPT" --gen-tokens "$GEN" |
    "$PY" -c 'import json,sys; [print(json.dumps(dict(json.loads(l), tool="mlx-lm", round='"$r"'))) for l in sys.stdin]' >>"$rows"
done
"$PY" - "$rows" "$STREAMS" "$GEN" >"$out/table.md" <<'PYEOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
gen = int(sys.argv[3])
keys = []
for r in rows:
    k = (r["tool"], r["path"], r["streams"])
    if k not in keys:
        keys.append(k)
med = lambda k, f: statistics.median(r[f] for r in rows if (r["tool"], r["path"], r["streams"]) == k)
# whole: generated tokens over the wall time of the whole batch, prompts
# included. The engine reads later rows' prompts between earlier rows'
# decode steps (continuous batching), so its generated tok/s, counted from
# each stream's first token, carries prompt reading that batch_generate,
# which reads every prompt before the first decode step, leaves out; the
# whole batch's rate compares the same work on both sides.
for r in rows:
    r["whole_tokens_per_s"] = r.get("generated", r["streams"] * gen) / r["wall_s"]
print("| tool | path | streams | prompt tok/s | generated tok/s | whole batch tok/s | rounds (gen tok/s; whole) |")
print("|---|---|---:|---:|---:|---:|---|")
for k in keys:
    each = "; ".join("%.1f, %.1f" % (r["gen_tokens_per_s"], r["whole_tokens_per_s"]) for r in rows if (r["tool"], r["path"], r["streams"]) == k)
    print("| %s | %s | %d | %.1f | %.1f | %.1f | %s |" % (k[0], k[1], k[2], med(k, "prompt_tokens_per_s"), med(k, "gen_tokens_per_s"), med(k, "whole_tokens_per_s"), each))
print()
print("| streams | engine ÷ mlx-lm batch_generate: generated tok/s | whole batch tok/s | engine ÷ mlx-lm stream_generate (1 stream) |")
print("|---:|---:|---:|---:|")
for n in [int(s) for s in sys.argv[2].split(",")]:
    e = ("posttrainllm", "engine", n)
    b = ("mlx-lm", "mlx-lm batch_generate", n)
    s = "%.2f×" % (med(e, "gen_tokens_per_s") / med(("mlx-lm", "mlx-lm stream_generate", 1), "gen_tokens_per_s")) if n == 1 else ""
    print("| %d | %.2f× | %.2f× | %s |" % (n, med(e, "gen_tokens_per_s") / med(b, "gen_tokens_per_s"),
                                         med(e, "whole_tokens_per_s") / med(b, "whole_tokens_per_s"), s))
PYEOF
cat "$out/table.md"
