package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/data/hftokenizer"
	"github.com/posttrainllm/posttrainllm/generate"
	"github.com/posttrainllm/posttrainllm/hf"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/runfolder"
)

// folderTokenizer is the tokenizer of a Hugging Face folder: its
// tokenizer.json, or for a GPT-2 model with GPT-2's vocabulary and no
// tokenizer.json, posttrainllm's GPT-2 tokenizer.
func folderTokenizer(dir, family string, vocab int) (data.Tokenizer, error) {
	path := filepath.Join(dir, "tokenizer.json")
	if _, err := os.Stat(path); err == nil {
		return hftokenizer.Load(path)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if gpt2, err := data.NewTokenizer("gpt2"); err == nil && family == hf.GPT2 && vocab == gpt2.VocabSize() {
		return gpt2, nil
	}
	return nil, fmt.Errorf("%s has no tokenizer.json", dir)
}

// sampleFolder continues prompt with the model of a Hugging Face folder and
// its own tokenizer.
func sampleFolder(dir, dtype, prompt, device string, opts runfolder.SampleOptions) (string, error) {
	if err := mlx.Do(func() error { return mlx.UseDevice(device) }); err != nil {
		return "", err
	}
	m, err := hf.Load(dir, dtype)
	if err != nil {
		return "", err
	}
	defer m.Free()
	tok, err := folderTokenizer(dir, m.Family, m.Model.Config.VocabSize)
	if err != nil {
		return "", err
	}
	return sampleModel(dir, m, tok, prompt, opts)
}

// sampleGGUF continues prompt with the model of a GGUF file and the
// tokenizer made from its metadata.
func sampleGGUF(path, dtype, prompt, device string, opts runfolder.SampleOptions) (string, error) {
	if err := mlx.Do(func() error { return mlx.UseDevice(device) }); err != nil {
		return "", err
	}
	m, err := hf.LoadGGUF(path, dtype)
	if err != nil {
		return "", err
	}
	defer m.Free()
	var tok data.Tokenizer
	err = withGGUFTokenizerFiles(path, m, func(dir string) (err error) {
		tok, err = hftokenizer.Load(filepath.Join(dir, "tokenizer.json"))
		return err
	})
	if err != nil {
		return "", err
	}
	return sampleModel(path, m.Model, tok, prompt, opts)
}

// withGGUFTokenizerFiles writes the tokenizer files made from GGUF file
// path's metadata (tokenizer.json, tokenizer_config.json,
// generation_config.json) into a temporary folder, the form the
// tokenizer.json reader and the chat template reader take, and calls read
// with it; the folder is removed when read returns.
func withGGUFTokenizerFiles(path string, m *hf.GGUFModel, read func(dir string) error) error {
	if m.TokenizerErr != nil {
		return m.TokenizerErr
	}
	dir, err := os.MkdirTemp("", "posttrainllm-gguf-tokenizer-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := runfolder.WriteTokenizerFiles(dir, m.Tokenizer); err != nil {
		return err
	}
	if err := read(dir); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// sampleModel continues prompt with an imported model and its tokenizer.
func sampleModel(src string, m *hf.Model, tok data.Tokenizer, prompt string, opts runfolder.SampleOptions) (string, error) {
	if v := m.Model.Config.VocabSize; tok.VocabSize() > v {
		return "", fmt.Errorf("%s: the tokenizer has %d ids, the model's vocab_size is %d", src, tok.VocabSize(), v)
	}
	out, err := runfolder.Generate(m.Model, m.Params, generate.PromptIDs(tok, prompt, opts.SpecialsAsText), opts)
	if err != nil {
		return "", err
	}
	return tok.Decode(out), nil
}
