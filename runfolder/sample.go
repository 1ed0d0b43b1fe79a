package runfolder

import (
	"context"
	"fmt"
	"slices"

	"github.com/posttrainllm/posttrainllm/checkpoint"
	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/generate"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/train"
)

// SampleOptions control text generation: package generate's options
// (the sampling settings, Recompute, Timing) and how a checkpoint's
// prompt is read.
type SampleOptions struct {
	generate.Options
	// SpecialsAsText encodes special tokens written in a prompt (such as
	// "<|im_start|>") as plain text instead of as their ids.
	SpecialsAsText bool
	// Tokenizers builds the checkpoint's tokenizer when its config names
	// one package data does not know (train.HFTokenizer); nil for
	// data.NewTokenizer. Generate does not use it.
	Tokenizers train.TokenizerOpener
}

// Generate extends prompt by opts.MaxTokens tokens, fewer only when one
// of opts.StopTokens (none unless given) is sampled, and returns the
// prompt and the tokens (generate.Tokens).
func Generate(m *model.Transformer, params []*mlx.Array, prompt []int32, opts SampleOptions) ([]int32, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if len(prompt) == 0 {
		return nil, fmt.Errorf("generate: empty prompt; give at least one token")
	}
	out, _, err := generate.Tokens(context.Background(), m, params, prompt, opts.Options, nil)
	if err != nil {
		return nil, err
	}
	return append(slices.Clone(prompt), out...), nil
}

// encodePrompt returns the ids of prompt: special tokens written in it as
// their ids unless opts.SpecialsAsText; the end-of-text id for "".
func encodePrompt(tok data.Tokenizer, prompt string, opts SampleOptions) []int32 {
	return generate.PromptIDs(tok, prompt, opts.SpecialsAsText)
}

// SampleCheckpoint loads the model of a checkpoint directory (or the newest
// checkpoint of a run folder) and continues prompt with generated text.
func SampleCheckpoint(path, prompt, device string, opts SampleOptions) (string, error) {
	var text string
	err := mlx.Do(func() error {
		var err error
		text, err = sampleCheckpoint(path, prompt, device, opts)
		return err
	})
	return text, err
}

// sampleCheckpoint is SampleCheckpoint on the MLX thread.
func sampleCheckpoint(path, prompt, device string, opts SampleOptions) (string, error) {
	if err := opts.Validate(); err != nil {
		return "", err
	}
	if err := mlx.UseDevice(device); err != nil {
		return "", err
	}
	dir, err := checkpoint.Resolve(path)
	if err != nil {
		return "", err
	}
	st, m, params, free, err := loadModel(dir)
	if err != nil {
		return "", err
	}
	defer free()
	tok, err := train.OpenRunTokenizer(opts.Tokenizers, st.Config, checkpoint.RunDirOf(dir))
	if err != nil {
		return "", fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	out, err := Generate(m, params, encodePrompt(tok, prompt, opts), opts)
	if err != nil {
		return "", err
	}
	return tok.Decode(out), nil
}
