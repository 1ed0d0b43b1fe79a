#!/usr/bin/env bash
# The GPU machine's half of scripts/offline/pack.sh: installs the carried
# mlx-cuda-13 and mlx wheels without a package registry, unpacks the carried
# binaries into .gpu/bin, then runs scripts/gpu-setup.sh, which finds MLX
# installed and checks that it runs on the GPU.
#
#   scripts/offline/setup.sh          # join, verify, install, unpack, check
#   scripts/offline/setup.sh stash    # copy the loads present now out of the tree
#
# The loads are .gpu/load1, .gpu/load2, ... as pack.sh made them; a wheel
# too large for one load is split into NAME.whl.partNN files, possibly over
# several loads. Where each transfer replaces the working tree, `stash`
# copies the loads present now to $PTLM_GPU_STASH (default
# /tmp/ptlm-gpu-stash), where the install after the next transfer finds
# them. The wheels go in with pip --no-index --no-deps, so the CUDA
# libraries mlx-cuda-13 needs must already be in python3's environment
# (nvidia-cublas, -cuda-nvrtc, -cuda-runtime, -cudnn-cu13, -cufft,
# -cusolver, -nccl-cu13, as a CUDA 13 PyTorch brings them).
set -euo pipefail

MLX_VERSION="${MLX_VERSION:-0.32.4}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
stash="${PTLM_GPU_STASH:-/tmp/ptlm-gpu-stash}"
python="${PYTHON:-python3}"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore

# loads lists the folders that may hold carried files, stash last.
loads() {
  local d
  for d in "$root"/.gpu/load* "$stash"/load*; do
    [[ -d "$d" ]] && echo "$d"
  done
  return 0
}

cmd="${1:-install}"
case "$cmd" in
  stash)
    mkdir -p "$stash"
    for d in $(loads); do
      [[ "$d" == "$stash"/* ]] && continue
      cp -r "$d" "$stash/"
      echo "offline: stashed $(du -sh "$d" | cut -f1) from $d in $stash"
    done
    exit 0
    ;;
  install) ;;
  *)
    echo "offline: unknown command '$cmd': want install or stash" >&2
    exit 2
    ;;
esac

if [[ -z "$(loads)" ]]; then
  echo "offline: no .gpu/load* folders (or $stash/load*): run scripts/offline/pack.sh where a registry is reachable" >&2
  exit 1
fi

# Carried binaries (gzipped by pack.sh) go to .gpu/bin.
for d in $(loads); do
  for z in "$d"/*.gz; do
    [[ -f "$z" ]] || continue
    mkdir -p "$root/.gpu/bin"
    b="$root/.gpu/bin/$(basename "${z%.gz}")"
    gunzip -c "$z" >"$b"
    chmod +x "$b"
  done
done

if MLX_VERSION="$MLX_VERSION" PYTHON="$python" "$root/scripts/gpu-setup.sh" installed; then
  echo "offline: mlx and mlx-cuda-13 $MLX_VERSION already installed"
else
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  # Whole wheels are copied; split ones are joined from their parts in name
  # order, whichever load each part came in.
  for d in $(loads); do
    find "$d" -maxdepth 1 -name '*.whl' -exec cp {} "$work/" \;
  done
  mapfile -t parts < <(for d in $(loads); do find "$d" -maxdepth 1 -name '*.whl.part*'; done |
    awk -F/ '{print $NF "\t" $0}' | sort -u -k1,1 | cut -f2)
  for p in "${parts[@]}"; do
    whl="$(basename "${p%.part*}")"
    cat "$p" >>"$work/$whl"
  done
  # Every load carries SHA256SUMS for all wheels: a missing or damaged part
  # shows here rather than as a broken install.
  sums="$(for d in $(loads); do cat "$d/SHA256SUMS" 2>/dev/null; done | sort -u)"
  for w in "$work"/*.whl; do
    want="$(awk -v n="$(basename "$w")" '$2 == n {print $1; exit}' <<<"$sums")"
    got="$(sha256sum "$w" | cut -d' ' -f1)"
    if [[ -n "$want" && "$want" != "$got" ]]; then
      echo "offline: $(basename "$w") has sha256 $got, want $want (a part is missing or damaged)" >&2
      exit 1
    fi
  done
  echo "offline: installing $(cd "$work" && ls *.whl | tr '\n' ' ')"
  "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir "$work"/*.whl
fi

"$root/scripts/gpu-setup.sh"
