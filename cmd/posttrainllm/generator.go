package main

import (
	"github.com/posttrainllm/posttrainllm/generate"
	"github.com/posttrainllm/posttrainllm/hf"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/train"
)

// generationSource is what sample --chat and chat generate from: --from
// (a run folder, checkpoint or Hugging Face folder) and --adapter.
type generationSource struct{ from, adapter string }

// check validates the paths as a usage error, before anything loads.
func (s generationSource) check(command string) error {
	if s.from == "" && s.adapter == "" {
		return usageError("%s needs --from RUN: %s, or a Hugging Face folder", command, checkpointPaths)
	}
	folder := s.from != "" && hf.IsFolder(s.from)
	if s.from != "" && !folder {
		if _, err := train.ResolveCheckpoint(s.from); err != nil {
			return usageError("invalid --from %s: %v", s.from, err)
		}
	}
	if s.adapter != "" {
		if folder {
			return usageError("--adapter with the Hugging Face folder %s: import it first (posttrainllm import) and fine-tune from the run", s.from)
		}
		dir, err := train.ResolveCheckpoint(s.adapter)
		if err != nil {
			return usageError("invalid --adapter %s: %v", s.adapter, err)
		}
		if _, err := train.ReadFineTuneConfig(dir); err != nil {
			return usageError("invalid --adapter %s: %v", s.adapter, err)
		}
	}
	return nil
}

// open loads the model with its tokenizer, chat template and end tokens.
func (s generationSource) open(device string) (*generate.Model, error) {
	if s.from != "" && hf.IsFolder(s.from) {
		if err := mlx.Do(func() error { return mlx.UseDevice(device) }); err != nil {
			return nil, err
		}
		return generate.OpenFolder(s.from, folderTokenizer)
	}
	return train.OpenGenerator(s.from, s.adapter, device, openTokenizer)
}
