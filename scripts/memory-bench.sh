#!/bin/sh
# memory-bench.sh measures what fine-tuning's memory tools buy: LoRA rank 8
# on every projection, one configuration after the other in one run (plain,
# chunked cross-entropy, gradient checkpointing, 4-bit quantized base, all
# three). It prints, per configuration, MLX's peak memory (the run's
# summary), the process's max RSS, and the seconds per update from
# metrics.jsonl after the second update (the first traces and JIT-compiles).
# With MLXLM_PYTHON set to the python of a virtual environment holding
# mlx-lm over the same MLX version (python -m venv V; V/bin/pip install
# "mlx[cpu]==0.32.4" mlx-lm), the same fine-tunes with mlx_lm.lora follow in
# the same run, over the same folder and records, and over mlx_lm.convert
# -q's 4-bit folder for QLoRA; their peak is the peak_memory of mlx-lm's
# last report (MLX's peak since the process started).
#
# Usage: scripts/memory-bench.sh [WORKDIR]
# Environment (defaults: the SmolLM2-135M-Instruct fixture of make
# real-model on the CPU):
#   MODEL    HF folder to fine-tune (scripts/shape-folder.py writes one in
#            the shape of Qwen2.5-0.5B)
#   CONTEXT  tokens per row (256)       BATCH  rows per update (2)
#   STEPS    updates per run (4)        CHUNK  --loss-chunk of the chunked runs (128)
#   DTYPE    compute dtype of the import (float32: MLX's CPU backend runs
#            bfloat16 matmuls far slower; bfloat16 on a GPU)
#   DEVICE   cpu or gpu (cpu)           BIN    a built posttrainllm (default: go build)
#   FLAGS    more finetune flags for every posttrainllm run ("--memory-budget 1GiB
#            --micro-batch 4": hold MLX's memory limit low, so the peak is what
#            the step keeps alive rather than what the host has queued)
#   TAG      suffix of the runs' labels and folders (to keep two settings apart)
#   ONLY     ours or mlxlm: run only posttrainllm's or only mlx-lm's fine-tunes
#   ROWS     the rows to run, by label without TAG (default all: lora lora-chunked
#            lora-checkpoint lora-checkpoint-chunked qlora4 qlora4-chunked
#            qlora4-checkpoint-chunked full-chunked mlx-lm-lora
#            mlx-lm-lora-checkpoint mlx-lm-qlora4)
set -eu
work=${1:-/tmp/posttrainllm-memory-bench}
root=$(cd "$(dirname "$0")/.." && pwd)
model=${MODEL:-$root/.deps/models/SmolLM2-135M-Instruct}
context=${CONTEXT:-256} batch=${BATCH:-2} steps=${STEPS:-4} chunk=${CHUNK:-128}
dtype=${DTYPE:-float32} device=${DEVICE:-cpu}
flags=${FLAGS:-} tag=${TAG:-} only=${ONLY:-} rows=${ROWS:-}
# mlx-lm's MLX calls posttrainllm's BLAS (see memory-vs-mlxlm.sh); none on a GPU machine.
blas=$(ls "$root"/.deps/mlx/mlx_cpu.libs/libblas-*.so.* 2>/dev/null | grep -v '\.reference$' | head -n 1 || true)
mkdir -p "$work"
bin=${BIN:-$work/posttrainllm}
python=${PYTHON:-$root/.deps/py/bin/python}
[ -n "${BIN:-}" ] || (cd "$root" && PKG_CONFIG_PATH=$root/.deps/pkgconfig go build -o "$bin" ./cmd/posttrainllm)
base=base-$dtype-$context
[ -d "$work/$base" ] || "$bin" import "$model" --out "$work/$base" --context "$context" --dtype "$dtype" --tokenizer hf >/dev/null
# 64 chat records that fill about a row each, cut from the repository's docs.
"$python" - "$root" "$work/chat.jsonl" "$context" <<'PY'
import glob, json, re, sys
words = re.sub(r"\s+", " ", " ".join(open(f).read() for f in sorted(glob.glob(sys.argv[1] + "/docs/*.md")))).split(" ")
n_words = int(sys.argv[3]) * 3 // 4
with open(sys.argv[2], "w") as out:
    for n in range(64):
        at = (n * n_words) % max(1, len(words) - n_words)
        q, a = words[at:at + 40], words[at + 40:at + n_words]
        out.write(json.dumps({"messages": [{"role": "user", "content": "Explain this passage: " + " ".join(q)},
                                           {"role": "assistant", "content": " ".join(a)}]}) + "\n")
PY
want() { [ -z "$rows" ] || case " $rows " in *" $1 "*) true ;; *) false ;; esac; }
run() { # label base flags...
  want "$1" || return 0
  label=$1$tag base=$2
  shift 2
  /usr/bin/time -f "maxrss_kb %M" "$bin" finetune --from "$work/$base" --data "$work/chat.jsonl" --targets all --rank 8 \
    --batch "$batch" --steps "$steps" --log-every 1 --lr 1e-4 --no-progress --device "$device" \
    --out "$work/$label" --overwrite $flags "$@" >"$work/$label.log" 2>&1
  peak=$(sed -n 's/.*peak memory \(.*\)$/\1/p' "$work/$label.log")
  rss=$(sed -n 's/^maxrss_kb \(.*\)$/\1/p' "$work/$label.log")
  secs=$("$python" -c "import json,sys; m=[json.loads(l) for l in open(sys.argv[1]) if '\"loss\"' in l]; m=[x for x in m if 'elapsed_s' in x]; print('%.3f' % ((m[-1]['elapsed_s']-m[1]['elapsed_s'])/(len(m)-2)))" "$work/$label/metrics.jsonl")
  printf '%-28s peak %-10s maxrss %6.2f GB  %6s s/update  (%s)\n' "$label" "$peak" "$(echo "$rss" | awk '{print $1/1e6}')" "$secs" "$*"
}
if [ "$only" != mlxlm ]; then
  run lora "$base" --loss-chunk -1
  run lora-chunked "$base" --loss-chunk "$chunk"
  run lora-checkpoint "$base" --loss-chunk -1 --grad-checkpoint
  run lora-checkpoint-chunked "$base" --loss-chunk "$chunk" --grad-checkpoint
  run qlora4 "$base" --loss-chunk -1 --quantize 4
  run qlora4-chunked "$base" --loss-chunk "$chunk" --quantize 4
  run qlora4-checkpoint-chunked "$base" --loss-chunk "$chunk" --grad-checkpoint --quantize 4
  run full-chunked "$base" --loss-chunk "$chunk" --method full
fi

[ -n "${MLXLM_PYTHON:-}" ] && [ "$only" != ours ] || exit 0
mkdir -p "$work/mlxdata"
cp "$work/chat.jsonl" "$work/mlxdata/train.jsonl"
head -n 2 "$work/chat.jsonl" >"$work/mlxdata/valid.jsonl"
! want mlx-lm-qlora4 || [ -d "$work/smol-mlx-q4" ] || "$MLXLM_PYTHON" -m mlx_lm convert --hf-path "$model" --mlx-path "$work/smol-mlx-q4" \
  -q --q-bits 4 --q-group-size 64 --dtype "$dtype" >/dev/null
mlxlm() { # label model flags...
  want "$1" || return 0
  label=$1$tag m=$2
  shift 2
  LD_PRELOAD=$blas /usr/bin/time -f "maxrss_kb %M" "$MLXLM_PYTHON" "$root/scripts/mlxlm/lora_report.py" --model "$m" --train --data "$work/mlxdata" -c "$root/scripts/mlxlm/lora.yaml" \
    --num-layers -1 --batch-size "$batch" --iters "$steps" --max-seq-length "$context" --learning-rate 1e-4 --mask-prompt \
    --steps-per-report 1 --steps-per-eval 1000 --val-batches 0 --adapter-path "$work/$label" "$@" >"$work/$label.log" 2>&1
  peak=$("$python" -c "import json,sys; r=[json.loads(l[7:]) for l in open(sys.argv[1]) if l.startswith('REPORT ')]; print('%.2f GB' % r[-1]['peak_memory'])" "$work/$label.log")
  rss=$(sed -n 's/^maxrss_kb \(.*\)$/\1/p' "$work/$label.log")
  secs=$("$python" -c "import json,sys; r=[json.loads(l[7:]) for l in open(sys.argv[1]) if l.startswith('REPORT ')]; print('%.3f' % (sum(1/x['iterations_per_second'] for x in r[2:])/len(r[2:])))" "$work/$label.log")
  printf '%-28s peak %-10s maxrss %6.2f GB  %6s s/update  (%s)\n' "$label" "$peak" "$(echo "$rss" | awk '{print $1/1e6}')" "$secs" "$*"
}
mlxlm mlx-lm-lora "$model"
mlxlm mlx-lm-lora-checkpoint "$model" --grad-checkpoint
mlxlm mlx-lm-qlora4 "$work/smol-mlx-q4"
