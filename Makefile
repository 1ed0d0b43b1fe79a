# posttrainllm: two commands on a fresh machine.
#   make run    installs MLX if missing, builds, trains the tiny preset briefly
#   make test   vet, format check, the CPU test suite and a short fuzz pass
SHELL := /bin/bash
GO ?= go
BIN := bin/posttrainllm
MLX_STAMP := .deps/mlx/.installed
RUN_STEPS ?= 200
FUZZTIME ?= 10s
LONG_FUZZTIME ?= 5m

# Fuzz targets as package:Target pairs; make test runs each for $(FUZZTIME).
FUZZ_TARGETS := ./mlx:FuzzValidateSafetensors ./data:FuzzReadTokenFile \
	./train:FuzzReadCheckpointState ./presets:FuzzParsePreset

.PHONY: all deps build run test vet fmt-check fuzz-short fuzz bench test-gpu clean

all: build

deps: $(MLX_STAMP)

$(MLX_STAMP): scripts/install-mlx.sh
	scripts/install-mlx.sh

build: deps
	$(GO) build -o $(BIN) ./cmd/posttrainllm

run: build
	$(BIN) train --preset tiny --steps $(RUN_STEPS) --out runs/tiny --overwrite

vet: deps
	$(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

test: deps vet fmt-check
	$(GO) test -count=1 -timeout 45m ./...
	$(MAKE) --no-print-directory fuzz-short

fuzz-short:
	@for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "fuzz $$pkg $$name for $(FUZZTIME)"; \
		$(GO) test $$pkg -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) || exit 1; \
	done

fuzz:
	$(MAKE) --no-print-directory fuzz-short FUZZTIME=$(LONG_FUZZTIME)

bench: build
	$(BIN) bench --preset tiny --compare

# GPU tests run on a CUDA machine with mlx-cuda-13 (see docs/performance/gpu.md).
test-gpu: deps
	PTLM_TEST_DEVICE=gpu $(GO) test -count=1 -run 'GPU' ./...

clean:
	rm -rf bin runs
