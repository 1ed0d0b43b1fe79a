#!/bin/sh
# memory-bench.sh measures what fine-tuning's memory tools buy on the
# SmolLM2-135M-Instruct fixture (make real-model): LoRA rank 8 on every
# projection, batch 2 × 256 tokens of chat records, 4 updates each, one
# configuration after the other in one run. It prints, per configuration,
# MLX's peak memory (the run's summary), the process's max RSS, and the
# seconds per update from metrics.jsonl between updates 2 and 4 (the first
# update traces and JIT-compiles). With MLXLM_PYTHON set to the python of
# a virtual environment holding mlx-lm over the same MLX version
# (python -m venv V; V/bin/pip install "mlx[cpu]==0.32.4" mlx-lm), the same
# fine-tunes with mlx_lm.lora follow in the same run, over the same folder
# and records, and over mlx_lm.convert -q's 4-bit folder for QLoRA; their
# peak is the peak_memory of mlx-lm's last report (MLX's peak since the process started).
# Usage: scripts/memory-bench.sh [WORKDIR]
set -eu
work=${1:-/tmp/posttrainllm-memory-bench}
root=$(cd "$(dirname "$0")/.." && pwd)
model=$root/.deps/models/SmolLM2-135M-Instruct
mkdir -p "$work"
bin=$work/posttrainllm
(cd "$root" && PKG_CONFIG_PATH=$root/.deps/pkgconfig go build -o "$bin" ./cmd/posttrainllm)
# float32: MLX's CPU backend runs bfloat16 matmuls far slower than float32.
[ -d "$work/smol-float32" ] || "$bin" import "$model" --out "$work/smol-float32" --context 256 >/dev/null
# 64 chat records of about 250 tokens, cut from the repository's docs.
"$root/.deps/py/bin/python" - "$root" "$work/chat.jsonl" <<'PY'
import glob, json, re, sys
words = re.sub(r"\s+", " ", " ".join(open(f).read() for f in sorted(glob.glob(sys.argv[1] + "/docs/*.md")))).split(" ")
with open(sys.argv[2], "w") as out:
    for n in range(64):
        q, a = words[n * 200:n * 200 + 40], words[n * 200 + 40:n * 200 + 200]
        out.write(json.dumps({"messages": [{"role": "user", "content": "Explain this passage: " + " ".join(q)},
                                           {"role": "assistant", "content": " ".join(a)}]}) + "\n")
PY
run() { # label base flags...
  label=$1 base=$2
  shift 2
  /usr/bin/time -f "maxrss_kb %M" "$bin" finetune --from "$work/$base" --data "$work/chat.jsonl" --targets all --rank 8 \
    --batch 2 --steps 4 --log-every 1 --lr 1e-4 --no-progress --out "$work/$label" --overwrite "$@" >"$work/$label.log" 2>&1
  peak=$(sed -n 's/.*peak memory \(.*\)$/\1/p' "$work/$label.log")
  rss=$(sed -n 's/^maxrss_kb \(.*\)$/\1/p' "$work/$label.log")
  secs=$("$root/.deps/py/bin/python" -c "import json,sys; m=[json.loads(l) for l in open(sys.argv[1]) if '\"loss\"' in l]; m=[x for x in m if 'elapsed_s' in x]; print('%.1f' % ((m[-1]['elapsed_s']-m[1]['elapsed_s'])/(len(m)-2)))" "$work/$label/metrics.jsonl")
  printf '%-28s peak %-10s maxrss %6.2f GB  %6s s/update  (%s)\n' "$label" "$peak" "$(echo "$rss" | awk '{print $1/1e6}')" "$secs" "$*"
}
run lora-f32 smol-float32 --loss-chunk -1
run lora-f32-chunked smol-float32 --loss-chunk 128
run lora-f32-checkpoint smol-float32 --loss-chunk -1 --grad-checkpoint
run qlora4 smol-float32 --loss-chunk -1 --quantize 4
run qlora4-checkpoint-chunked smol-float32 --loss-chunk 128 --grad-checkpoint --quantize 4

[ -n "${MLXLM_PYTHON:-}" ] || exit 0
mkdir -p "$work/mlxdata"
cp "$work/chat.jsonl" "$work/mlxdata/train.jsonl"
head -n 2 "$work/chat.jsonl" >"$work/mlxdata/valid.jsonl"
[ -d "$work/smol-mlx-q4" ] || "$MLXLM_PYTHON" -m mlx_lm convert --hf-path "$model" --mlx-path "$work/smol-mlx-q4" \
  -q --q-bits 4 --q-group-size 64 --dtype float32 >/dev/null
cat >"$work/mlxlm.yaml" <<'YAML'
lora_parameters:
  rank: 8
  scale: 2.0
  dropout: 0.0
  keys: [self_attn.q_proj, self_attn.k_proj, self_attn.v_proj, self_attn.o_proj, mlp.gate_proj, mlp.up_proj, mlp.down_proj]
YAML
# mlx_lm.lora with a callback that prints each report (its terminal UI
# shows neither the peak memory nor the iterations per second); no
# validation batches (it validates at the first and last iteration).
cat >"$work/mlxlm_lora.py" <<'PY'
import json, sys
import mlx_lm.lora as lora
from mlx_lm.tuner.callbacks import TrainingCallback
class Report(TrainingCallback):
    def on_train_loss_report(self, info):
        print("REPORT " + json.dumps(info), flush=True)
lora.get_reporting_callbacks = lambda *args, **kwargs: Report()
sys.argv = ["mlx_lm.lora"] + sys.argv[1:]
lora.main()
PY
mlxlm() { # label model flags...
  label=$1 m=$2
  shift 2
  /usr/bin/time -f "maxrss_kb %M" "$MLXLM_PYTHON" "$work/mlxlm_lora.py" --model "$m" --train --data "$work/mlxdata" -c "$work/mlxlm.yaml" \
    --num-layers -1 --batch-size 2 --iters 4 --max-seq-length 256 --learning-rate 1e-4 --mask-prompt \
    --steps-per-report 1 --steps-per-eval 1000 --val-batches 0 --adapter-path "$work/$label" "$@" >"$work/$label.log" 2>&1
  peak=$("$root/.deps/py/bin/python" -c "import json,sys; r=[json.loads(l[7:]) for l in open(sys.argv[1]) if l.startswith('REPORT ')]; print('%.2f GB' % r[-1]['peak_memory'])" "$work/$label.log")
  rss=$(sed -n 's/^maxrss_kb \(.*\)$/\1/p' "$work/$label.log")
  secs=$("$root/.deps/py/bin/python" -c "import json,sys; r=[json.loads(l[7:]) for l in open(sys.argv[1]) if l.startswith('REPORT ')]; print('%.1f' % (sum(1/x['iterations_per_second'] for x in r[2:])/len(r[2:])))" "$work/$label.log")
  printf '%-28s peak %-10s maxrss %6.2f GB  %6s s/update  (%s)\n' "$label" "$peak" "$(echo "$rss" | awk '{print $1/1e6}')" "$secs" "$*"
}
mlxlm mlx-lm-lora-f32 "$model"
mlxlm mlx-lm-lora-f32-checkpoint "$model" --grad-checkpoint
mlxlm mlx-lm-qlora4 "$work/smol-mlx-q4"
