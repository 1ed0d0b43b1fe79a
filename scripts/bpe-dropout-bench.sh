#!/usr/bin/env bash
# Tokenizer throughput, side by side in one run: posttrainllm's GPT-2
# encodings (the tiktoken-go codec that `--tokenizer gpt2` uses, and
# data.BPEDropout without and with dropout) against Hugging Face tokenizers'
# encode_batch (Rust) on the same texts, the Go standard library sources.
# It also checks that HF's ids without dropout equal posttrainllm's.
#
#   scripts/bpe-dropout-bench.sh [BYTES] [ROUNDS]
#
# The Python tokenizers package is pinned and installed project-locally in
# .deps/tokbench-venv (git-ignored); make test does not need it.
set -eu
set -o pipefail

cd "$(dirname "$0")/.."
BYTES=${1:-8000000}
ROUNDS=${2:-3}
TOKENIZERS_VERSION=0.23.3
venv=.deps/tokbench-venv

if ! "$venv/bin/python" -c "import tokenizers, sys; sys.exit(tokenizers.__version__ != '$TOKENIZERS_VERSION')" 2>/dev/null; then
	python3 -m venv "$venv"
	"$venv/bin/pip" install -q "tokenizers==$TOKENIZERS_VERSION"
fi
export PKG_CONFIG_PATH=${PKG_CONFIG_PATH:-$PWD/.deps/pkgconfig}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
go run ./scripts/tokbench -out "$work" -bytes "$BYTES" -rounds "$ROUNDS"
"$venv/bin/python" scripts/tokbench/hf_bench.py "$work" "$ROUNDS"
