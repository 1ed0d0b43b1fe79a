#!/usr/bin/env bash
# grpo-vs-mlxlmlora.sh times posttrainllm's GRPO (finetune --objective grpo)
# beside mlx-lm-lora's (make mlxlmlora-deps) on the same work: the
# SmolLM2-135M-Instruct folder of make real-model, the two-digit addition
# task of scripts/grpo-task.py, the same prompts at each update (the first
# PROMPTS×UPDATES training records, taken in file order by both: mlx-lm-lora
# through scripts/mlxlmlora/grpo_timed.py --sequential), the same group size,
# completion budget, sampler (temperature 1, top-p TOP_P, no top-k), rewards
# (exact 1, format 0.2: scripts/mlxlmlora/grpo_rewards.py), LoRA rank 8,
# alpha 16 (scale 2) on all seven projections of all 30 layers, loss "grpo",
# ε EPSILON, β 0, AdamW (β 0.9/0.95, ε 1e-8, bias correction, no weight
# decay) at a constant LR, no gradient clipping. Completions stop at the end
# token only (mlx-lm-lora also stops at </answer> by default: STOP_AT_ANSWER=1
# keeps that for it alone). mlx-lm-lora decodes at most PROMPTS sequences at
# a time (its completion batch is its prompt batch); posttrainllm samples
# the whole group at once.
#
# Runs alternate posttrainllm, mlx-lm-lora, for ROUNDS rounds, each a fresh
# process under /usr/bin/time -v. Reported per tool (scripts/mlxlmlora/
# grpo_report.py, a markdown table with ratios ours ÷ theirs): seconds per
# update (median of the updates after the first, which traces and compiles;
# loading excluded), the first update, rollout and the rest (scoring,
# backward, optimizer) where the tool reports them, completion tokens, the
# MLX peak since training started (mx.get_peak_memory; posttrainllm's
# peak_memory_bytes) and the process's peak RSS.
# On the CPU, mlx-lm-lora runs with posttrainllm's BLAS preloaded (the
# OpenBLAS shim cmd/install-mlx puts in .deps/mlx in place of the wheel's
# reference BLAS, same soname), as in scripts/memory-vs-mlxlm.sh: with the
# wheel's own BLAS (PRELOAD_BLAS=0) an update takes ~10x as long.
#
# Usage: scripts/grpo-vs-mlxlmlora.sh [WORKDIR]   (default /tmp/posttrainllm-grpo-vs-mlxlmlora)
# Environment (defaults): PROMPTS (2) prompts per update, GROUP (4)
# completions per prompt, GEN (32) completion budget in tokens, UPDATES (3),
# ROUNDS (1), BIN (bin/posttrainllm), DEVICE (cpu; gpu for a CUDA machine,
# where mlxlmlora-deps is installed with MLX_BACKEND=cuda-13), DTYPE
# (float32; bfloat16 imports both sides' model in bfloat16), LR (1e-5),
# EPSILON (0.2), TOP_P (1), SEED (0), STOP_AT_ANSWER (0), TOOLS ("ours
# mlxlmlora": one of them times that side alone), PRELOAD_BLAS (1; 0 runs
# mlx-lm-lora on its wheel's BLAS), MLXLMLORA_PYTHON (.deps/mlxlmlora/bin/
# python), MODEL (.deps/models/SmolLM2-135M-Instruct), OURS_FLAGS (extra
# flags for posttrainllm finetune).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
work=${1:-/tmp/posttrainllm-grpo-vs-mlxlmlora}
prompts=${PROMPTS:-2} group=${GROUP:-4} gen=${GEN:-32} updates=${UPDATES:-3} rounds=${ROUNDS:-1}
device=${DEVICE:-cpu} dtype=${DTYPE:-float32} lr=${LR:-1e-5} epsilon=${EPSILON:-0.2}
top_p=${TOP_P:-1} seed=${SEED:-0} stop_at_answer=${STOP_AT_ANSWER:-0} tools=${TOOLS:-ours mlxlmlora}
bin=${BIN:-$root/bin/posttrainllm}
py=${MLXLMLORA_PYTHON:-$root/.deps/mlxlmlora/bin/python}
model=${MODEL:-$root/.deps/models/SmolLM2-135M-Instruct}
helpers=$root/scripts/mlxlmlora

for v in prompts group gen updates rounds; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "grpo-vs-mlxlmlora: ${v^^}=${!v}: want a positive integer" >&2; exit 2; }
done
[[ $device == cpu || $device == gpu ]] || { echo "grpo-vs-mlxlmlora: DEVICE=$device: want cpu or gpu" >&2; exit 2; }
[[ $dtype == float32 || $dtype == bfloat16 ]] || { echo "grpo-vs-mlxlmlora: DTYPE=$dtype: want float32 or bfloat16" >&2; exit 2; }
[[ -d $model ]] || { echo "grpo-vs-mlxlmlora: $model is missing: run make real-model" >&2; exit 1; }
[[ " $tools " != *" mlxlmlora "* || -x $py ]] || { echo "grpo-vs-mlxlmlora: $py is missing: run make mlxlmlora-deps" >&2; exit 1; }
[[ " $tools " != *" ours "* || -x $bin ]] || { echo "grpo-vs-mlxlmlora: $bin is missing: run make build (or set BIN)" >&2; exit 1; }
mkdir -p "$work/results"
rm -f "$work"/results/*.json

# The task, and the records of this comparison: the first PROMPTS×UPDATES.
python3 "$root/scripts/grpo-task.py" "$work/task" --seed "$seed" >/dev/null
n=$((prompts * updates))
(( n <= 256 )) || { echo "grpo-vs-mlxlmlora: PROMPTS×UPDATES=$n: want at most the 256 training prompts" >&2; exit 2; }
head -n "$n" "$work/task/train.jsonl" >"$work/train.jsonl"
mkdir -p "$work/mlxdata"
head -n "$n" "$work/task/mlxlmlora/train.jsonl" >"$work/mlxdata/train.jsonl"
rm -f "$work/mlxdata/valid.jsonl" "$work/mlxdata/test.jsonl" # no held-out evaluation inside the timed loop

# Each side's model, in DTYPE.
theirs_model=$model
if [[ $dtype == bfloat16 && " $tools " == *" mlxlmlora "* ]]; then
  theirs_model=$work/smol-bf16-mlx
  [[ -d $theirs_model ]] || "$py" -m mlx_lm convert --hf-path "$model" --mlx-path "$theirs_model" --dtype bfloat16 >/dev/null
fi
context=$(( (96 + gen + 63) / 64 * 64 )) # the 76-token prompt and the completion budget
ours_base=$work/smol-$dtype-$context
if [[ " $tools " == *" ours "* && ! -d $ours_base ]]; then
  "$bin" import "$model" --out "$ours_base" --dtype "$dtype" --context "$context" >"$work/import.log" 2>&1 ||
    { cat "$work/import.log" >&2; exit 1; }
fi

# mlx-lm-lora's settings its command line has no flag for.
cat >"$work/mlxlmlora.yaml" <<EOF
lora_parameters: {rank: 8, scale: 2.0, dropout: 0.0}
optimizer_config:
  adamw: {betas: [0.9, 0.95], eps: 1.0e-8, weight_decay: 0.0, bias_correction: true}
fuse: false
EOF

# /usr/bin/time -v gives each process's peak RSS (where it is missing,
# mlx-lm-lora's wrapper still reports its own).
timed() { # file command...
  local f=$1; shift
  if [[ -x /usr/bin/time ]]; then /usr/bin/time -v -o "$f" "$@"; else : >"$f"; "$@"; fi
}

blas=
if [[ $device == cpu && ${PRELOAD_BLAS:-1} == 1 ]]; then
  blas=$(ls "$root"/.deps/mlx/mlx_cpu.libs/libblas-*.so.* 2>/dev/null | grep -v '\.reference$' | head -n 1 || true)
fi

ours() { # round
  local out=$work/ours-$1
  local cmd=("$bin" finetune --objective grpo --from "$ours_base" --data "$work/train.jsonl"
    --valid "$work/task/heldout.jsonl" --eval-every 0
    --rank 8 --alpha 16 --targets all --group-size "$group" --max-completion "$gen"
    --temperature 1 --top-p "$top_p" --reward exact:1,format:0.2 --loss-type grpo
    --epsilon "$epsilon" --beta 0 --batch "$((prompts * group))" --steps "$updates" --warmup 0
    --optimizer adamw --weight-decay 0 --grad-clip 0 --lr "$lr" --schedule constant
    --seed "$seed" --log-every 1 --device "$device" --no-progress --out "$out" --overwrite ${OURS_FLAGS:-})
  echo "${cmd[*]}" >"$work/ours-$1.cmd"
  if ! timed "$work/ours-$1.time" "${cmd[@]}" >"$work/ours-$1.log" 2>&1; then
    echo "grpo-vs-mlxlmlora: posttrainllm failed (round $1); its log, $work/ours-$1.log, ends:" >&2
    tail -n 15 "$work/ours-$1.log" >&2
    return 1
  fi
  "$py" "$helpers/grpo_report.py" ours --run "$out" --log "$work/ours-$1.log" --time "$work/ours-$1.time" \
    --completions $((prompts * group)) >"$work/results/ours-$1.json"
}

theirs() { # round
  local out=$work/mlxlmlora-$1
  rm -rf "$out"
  local cmd=("$py" "$helpers/grpo_timed.py" --report "$work/results/mlxlmlora-$1.raw" --device "$device"
    --top-p "$top_p" --top-k 0 --sequential)
  [[ $stop_at_answer == 1 ]] && cmd+=(--stop-at-answer)
  cmd+=(-- --model "$theirs_model" --train --train-mode grpo --train-type lora --num-layers -1
    --data "$work/mlxdata" -c "$work/mlxlmlora.yaml" --optimizer adamw --learning-rate "$lr"
    --batch-size "$prompts" --iters "$updates" --group-size "$group" --max-completion-length "$gen"
    --temperature 1 --epsilon "$epsilon" --beta 0 --grpo-loss-type grpo
    --reward-functions-file "$helpers/grpo_rewards.py" --reward-functions exact,format --reward-weights "[1,0.2]"
    --steps-per-report 1 --steps-per-eval 1000000 --save-every 1000000 --seed "$seed" --adapter-path "$out")
  echo "${cmd[*]}" >"$work/mlxlmlora-$1.cmd"
  if ! LD_PRELOAD=$blas timed "$work/mlxlmlora-$1.time" "${cmd[@]}" >"$work/mlxlmlora-$1.log" 2>&1; then
    echo "grpo-vs-mlxlmlora: mlx-lm-lora failed (round $1); its log, $work/mlxlmlora-$1.log, ends:" >&2
    tail -n 15 "$work/mlxlmlora-$1.log" >&2
    return 1
  fi
  "$py" "$helpers/grpo_report.py" theirs --raw "$work/results/mlxlmlora-$1.raw" --time "$work/mlxlmlora-$1.time" \
    >"$work/results/mlxlmlora-$1.json"
}

status=0
for ((r = 1; r <= rounds; r++)); do
  for t in $tools; do
    case $t in
      ours) ours "$r" || status=1 ;;
      mlxlmlora) theirs "$r" || status=1 ;;
      *) echo "grpo-vs-mlxlmlora: TOOLS has $t: want ours and/or mlxlmlora" >&2; exit 2 ;;
    esac
  done
done

echo "GRPO, SmolLM2-135M-Instruct ($dtype, $device): $prompts prompts × $group completions of at most $gen tokens per update, $updates updates, $rounds round(s)"
"$py" "$helpers/grpo_report.py" table "$work"/results/*.json | tee "$work/table.md"
exit $status
