#!/bin/sh
# memory-vs-mlxlm.sh compares the peak memory of posttrainllm's and
# mlx-lm's LoRA fine-tunes of the SmolLM2-135M-Instruct fixture (make
# real-model) over the same weights and the same rows: LoRA rank 8 (alpha
# 16, mlx-lm's scale 2) on every projection of all 30 layers, batch 4,
# prompts masked, in float32, and QLoRA over the 4-bit folder
# mlx_lm.convert -q writes (groups of 64, float32 scales), which posttrainllm
# imports keeping it quantized. The 32 chat records are cut from the
# repository's docs so that each renders to 72-94 tokens with the model's
# chat template: mlx-lm pads every batch to 97 tokens (one plus a multiple
# of 32) and trains on 96 positions, posttrainllm's --context 96 rows are
# as long. Runs alternate posttrainllm, mlx-lm, in ROUNDS rounds. The peak
# is MLX's: posttrainllm's metrics.jsonl peak_memory_bytes (since training
# started), mlx-lm's peak_memory of its reports (since the process
# started, loading included). Slow CPUs: QLoRA's quantized matmuls are
# slow on MLX's CPU backend, so the QLoRA runs do 2 (posttrainllm) and 1
# (mlx-lm) updates; the peak is reached at the first.
# mlx-lm runs with posttrainllm's BLAS preloaded (the OpenBLAS shim
# cmd/install-mlx puts in .deps/mlx in place of the wheel's reference BLAS,
# same soname), so both sides' matmuls run in the same library and their
# speeds compare: each run also prints its seconds per update, the mean
# over the updates after the first (which traces and compiles).
# Usage: scripts/memory-vs-mlxlm.sh [WORKDIR [ROUNDS]]
# MLXLM_PYTHON defaults to .deps/mlxlm/bin/python (make mlxlm-deps);
# LORA_STEPS (3) and QLORA_STEPS (2) set the updates of posttrainllm's runs,
# mlx-lm's do one fewer (its first report comes after its first update).
set -eu
work=${1:-/tmp/posttrainllm-memory-vs-mlxlm}
rounds=${2:-1}
root=$(cd "$(dirname "$0")/.." && pwd)
model=$root/.deps/models/SmolLM2-135M-Instruct
py=${MLXLM_PYTHON:-$root/.deps/mlxlm/bin/python}
lora_steps=${LORA_STEPS:-3} qlora_steps=${QLORA_STEPS:-2}
blas=$(ls "$root"/.deps/mlx/mlx_cpu.libs/libblas-*.so.* 2>/dev/null | grep -v '\.reference$' | head -n 1)
mkdir -p "$work/mlxdata"
bin=$work/posttrainllm
(cd "$root" && PKG_CONFIG_PATH=$root/.deps/pkgconfig go build -o "$bin" ./cmd/posttrainllm)
[ -d "$work/smol-q4-mlx" ] || "$py" -m mlx_lm convert --hf-path "$model" --mlx-path "$work/smol-q4-mlx" \
  -q --q-bits 4 --q-group-size 64 --dtype float32 >/dev/null
[ -d "$work/smol-f32" ] || "$bin" import "$model" --out "$work/smol-f32" --context 96 >/dev/null
[ -d "$work/smol-q4" ] || "$bin" import "$work/smol-q4-mlx" --out "$work/smol-q4" --context 96 >/dev/null
"$py" - "$root" "$model" "$work/chat.jsonl" <<'PY'
import glob, json, re, sys
from transformers import AutoTokenizer
tok = AutoTokenizer.from_pretrained(sys.argv[2])
words = re.sub(r"\s+", " ", " ".join(open(f).read() for f in sorted(glob.glob(sys.argv[1] + "/docs/*.md")))).split(" ")
recs, n = [], 0
while len(recs) < 32 and n * 40 + 40 < len(words):
    m = [{"role": "user", "content": " ".join(words[n * 40:n * 40 + 8])},
         {"role": "assistant", "content": " ".join(words[n * 40 + 8:n * 40 + 26])}]
    n += 1
    if 72 <= len(tok.encode(tok.apply_chat_template(m, tokenize=False), add_special_tokens=False)) <= 94:
        recs.append({"messages": m})
with open(sys.argv[3], "w") as out:
    out.writelines(json.dumps(r) + "\n" for r in recs)
PY
cp "$work/chat.jsonl" "$work/mlxdata/train.jsonl"
head -n 2 "$work/chat.jsonl" >"$work/mlxdata/valid.jsonl"
ours() { # label base steps
  "$bin" finetune --from "$work/$2" --data "$work/chat.jsonl" --targets all --rank 8 --alpha 16 --batch 4 \
    --steps "$3" --warmup 1 --log-every 1 --lr 1e-4 --mask-prompt --context 96 --no-progress \
    --out "$work/$1" --overwrite >"$work/$1.log" 2>&1
  peak=$("$py" -c "import json,sys; print('%.3f GB' % (max(json.loads(l).get('peak_memory_bytes', 0) for l in open(sys.argv[1])) / 1e9))" "$work/$1/metrics.jsonl")
  secs=$("$py" -c "import json,sys; m=[json.loads(l) for l in open(sys.argv[1])]; m=[x['elapsed_s'] for x in m if 'elapsed_s' in x]; print('%.2f' % ((m[-1]-m[0])/(len(m)-1)) if len(m) > 1 else '-')" "$work/$1/metrics.jsonl")
  printf '%-22s posttrainllm peak %s  %s s/update  (%s)\n' "$1" "$peak" "$secs" "$(grep -o 'examples cut.*' "$work/$1.log" || echo 'no example cut')"
}
mlxlm() { # label folder iters
  LD_PRELOAD=$blas "$py" "$root/scripts/mlxlm/lora_report.py" --model "$2" --train --data "$work/mlxdata" -c "$root/scripts/mlxlm/lora.yaml" --num-layers -1 \
    --batch-size 4 --iters "$3" --max-seq-length 128 --learning-rate 1e-4 --mask-prompt --steps-per-report 1 \
    --steps-per-eval 1000 --val-batches 0 --adapter-path "$work/$1" >"$work/$1.log" 2>&1
  peak=$("$py" -c "import json,sys; r=[json.loads(l[7:]) for l in open(sys.argv[1]) if l.startswith('REPORT ')]; print('%.3f GB' % max(x['peak_memory'] for x in r))" "$work/$1.log")
  secs=$("$py" -c "import json,sys; r=[json.loads(l[7:]) for l in open(sys.argv[1]) if l.startswith('REPORT ')][1:]; print('%.2f' % (sum(1/x['iterations_per_second'] for x in r)/len(r)) if r else '-')" "$work/$1.log")
  printf '%-22s mlx-lm       peak %s  %s s/update\n' "$1" "$peak" "$secs"
}
r=1
while [ "$r" -le "$rounds" ]; do
  ours "lora-ours-$r" smol-f32 "$lora_steps"
  mlxlm "lora-mlxlm-$r" "$model" $((lora_steps - 1))
  ours "qlora-ours-$r" smol-q4 "$qlora_steps"
  mlxlm "qlora-mlxlm-$r" "$work/smol-q4-mlx" $((qlora_steps - 1))
  r=$((r + 1))
done
