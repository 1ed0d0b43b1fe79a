#!/usr/bin/env bash
# Data-parallel scaling on one host with two or more CUDA GPUs: tokens per
# second of posttrainllm bench --nproc N over one GPU, with the same batch
# per GPU, for each preset, next to PyTorch DistributedDataParallel
# (torchrun, N processes) over PyTorch on one GPU, the same model and update
# (bench/peers/torch_peer.py). Every row runs in this one call, one after
# the other, so the ratios compare runs of the same machine state.
#
#   scripts/gpu-distributed.sh [OUTDIR]     # default $OUT, else runs/gpu-distributed
#
# Environment: PRESETS ("huge mega"), NPROC (2), WARMUP (20 untimed steps),
# STEPS (50 timed steps), TORCH (1; 0 leaves out the PyTorch rows),
# TORCH_COMPILE (0; 1 adds torch.compile rows, single and DDP).
#
# It installs nothing beyond scripts/gpu-setup.sh (MLX's CUDA wheel) and
# needs posttrainllm in .gpu/bin: built here when Go is installed, else
# carried over with scripts/offline/ (pack.sh where Go is, setup.sh here).
# NVLink multicast (NVLS) stays off. OUTDIR receives table.md, log.txt and
# raw/ (every JSON result and log).
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
out="${1:-${OUT:-runs/gpu-distributed}}"
PRESETS="${PRESETS:-huge mega}"
NPROC="${NPROC:-2}"
WARMUP="${WARMUP:-20}"
STEPS="${STEPS:-50}"
TORCH="${TORCH:-1}"
TORCH_COMPILE="${TORCH_COMPILE:-0}"
mkdir -p "$out/raw"
exec > >(tee -a "$out/log.txt") 2>&1

export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

echo "== setup"
scripts/gpu-setup.sh || { echo "gpu-distributed: setup failed"; exit 1; }
libdir="$(scripts/gpu-setup.sh libdir)"
export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
bin="$root/.gpu/bin/posttrainllm"
if command -v go >/dev/null; then
  make --no-print-directory build BIN="$bin" || { echo "gpu-distributed: build failed"; exit 1; }
fi
[[ -x "$bin" ]] || { echo "gpu-distributed: no $bin (install Go, or see scripts/offline/README.md)"; exit 1; }
gpus="$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)"
(( gpus >= NPROC )) || { echo "gpu-distributed: $gpus GPU(s), NPROC=$NPROC needs $NPROC"; exit 1; }
nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.sm,power.limit --format=csv
nvidia-smi topo -m || true
python3 -c 'import torch; print("torch", torch.__version__)' || true
"$bin" version 2>/dev/null || true

status=0
rows=()
# row LABEL FILE CMD...: runs one configuration; its last JSON line joins
# the table, a failure is reported and left out.
row() {
  local label="$1" file="$2"
  shift 2
  echo "== $label"
  if "$@" >"$out/raw/$file.json" 2>"$out/raw/$file.log"; then
    grep -o '"tokens_per_s": *[0-9.e+]*' "$out/raw/$file.json" | tail -n 1
    rows+=("$label=$out/raw/$file.json")
  else
    echo "gpu-distributed: $label failed:"; tail -20 "$out/raw/$file.log"; status=1
  fi
}

for preset in $PRESETS; do
  # The preset's batch × accum on every GPU, run as the preset gives it
  # (no plan probe), as the PyTorch peer runs it.
  micro="$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["batch"])' "presets/$preset.json")"
  ptlm() { "$bin" bench --preset "$preset" --device gpu --warmup-steps "$WARMUP" --steps "$STEPS" --micro-batch "$micro" --json "$@"; }
  torch1() { CUDA_VISIBLE_DEVICES=0 python3 bench/peers/torch_peer.py --preset "$preset" --warmup "$WARMUP" --steps "$STEPS" "$@"; }
  torchN() { python3 -m torch.distributed.run --standalone --nproc_per_node "$NPROC" bench/peers/torch_peer.py \
    --preset "$preset" --warmup "$WARMUP" --steps "$STEPS" "$@"; }
  row "$preset posttrainllm 1 GPU" "$preset-ptlm-1" env CUDA_VISIBLE_DEVICES=0 "$bin" bench --preset "$preset" --device gpu \
    --warmup-steps "$WARMUP" --steps "$STEPS" --micro-batch "$micro" --json
  row "$preset posttrainllm $NPROC GPUs" "$preset-ptlm-$NPROC" ptlm --nproc "$NPROC"
  if [[ "$TORCH" == 1 ]]; then
    row "$preset PyTorch 1 GPU" "$preset-torch-1" torch1
    row "$preset PyTorch DDP $NPROC GPUs" "$preset-torch-$NPROC" torchN
    if [[ "$TORCH_COMPILE" == 1 ]]; then
      row "$preset torch.compile 1 GPU" "$preset-torchc-1" torch1 --compile
      row "$preset torch.compile DDP $NPROC GPUs" "$preset-torchc-$NPROC" torchN --compile
    fi
  fi
done

echo "== table"
python3 - "$NPROC" "${rows[@]}" <<'PY' | tee "$out/table.md"
import json, sys

nproc = sys.argv[1]
res = {}
for arg in sys.argv[2:]:
    label, path = arg.split("=", 1)
    text = open(path).read()
    try:  # posttrainllm bench --json: one indented object
        res[label] = json.loads(text)
    except json.JSONDecodeError:  # the peers: one JSON line, last
        res[label] = json.loads([l for l in text.splitlines() if l.startswith("{")][-1])
print(f"| run | ranks | tokens/step | ms/step p50 | tokens/s | {nproc} GPUs / 1 GPU |")
print("|---|---:|---:|---:|---:|---:|")
for label, r in res.items():
    ratio = ""
    if f" {nproc} GPUs" in label:
        one = label.replace(f"DDP {nproc} GPUs", "1 GPU").replace(f"{nproc} GPUs", "1 GPU")
        if one in res:
            ratio = f"{r['tokens_per_s'] / res[one]['tokens_per_s']:.2f}×"
    print(f"| {label} | {r.get('ranks', 1)} | {r['tokens_per_step']} | {r['ms_per_step_median']:.1f} | "
          f"{r['tokens_per_s']:.0f} | {ratio} |")
PY
exit "$status"
