package main

import (
	"github.com/posttrainllm/posttrainllm/checkpoint"
	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/data/chattemplate"
	"github.com/posttrainllm/posttrainllm/finetune"
	"github.com/posttrainllm/posttrainllm/generate"
	"github.com/posttrainllm/posttrainllm/hf"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/runfolder"
)

// generationSource is what sample, chat, serve and bench --generate
// generate from: --from (a run folder, checkpoint, Hugging Face folder or
// GGUF file), --adapter and --dtype.
type generationSource struct{ from, adapter, dtype string }

// dtypeUsage is the help of --dtype, the compute dtype of a model folder.
const dtypeUsage = "compute dtype of a Hugging Face folder or GGUF file: float32, bfloat16 or float16 (default float32; a run computes in its own)"

// checkDtype validates --dtype as a usage error: a compute dtype, and a
// Hugging Face folder or GGUF file to apply it to (a run computes in the
// dtype it was made in).
func (s generationSource) checkDtype() error {
	if s.dtype != "" && model.CheckDtype(s.dtype) != nil {
		return usageError("invalid --dtype %s: want float32, bfloat16 or float16", s.dtype)
	}
	if s.dtype != "" && (s.from == "" || !hf.IsFolder(s.from) && !hf.IsGGUF(s.from)) {
		return usageError("--dtype %s with a run: a run computes in the dtype it was made in; --dtype sets a Hugging Face folder's or GGUF file's", s.dtype)
	}
	return nil
}

// check validates the paths as a usage error, before anything loads.
func (s generationSource) check(command string) error {
	if s.from == "" && s.adapter == "" {
		return usageError("%s needs --from RUN: %s, a Hugging Face folder or a GGUF file", command, checkpointPaths)
	}
	folder := s.from != "" && (hf.IsFolder(s.from) || hf.IsGGUF(s.from))
	if s.from != "" && !folder {
		if _, err := checkpoint.Resolve(s.from); err != nil {
			return usageError("invalid --from %s: %v", s.from, err)
		}
	}
	if s.adapter != "" {
		if folder {
			return usageError("--adapter with %s: --from takes the run the adapters were trained on; import a Hugging Face folder or GGUF file first (posttrainllm import) and fine-tune from the run", s.from)
		}
		dir, err := checkpoint.Resolve(s.adapter)
		if err != nil {
			return usageError("invalid --adapter %s: %v", s.adapter, err)
		}
		if _, err := finetune.ReadConfig(dir); err != nil {
			return usageError("invalid --adapter %s: %v", s.adapter, err)
		}
	}
	return s.checkDtype()
}

// openOn checks the paths for command, picks the device (auto: the GPU
// where there is one, else the CPU) and opens the model there.
func (s generationSource) openOn(command, device string) (*generate.Model, error) {
	if err := s.check(command); err != nil {
		return nil, err
	}
	dev, err := pickDevice(device, "cpu", "")
	if err != nil {
		return nil, err
	}
	return s.open(dev)
}

// open loads the model with its tokenizer, chat template and end tokens.
func (s generationSource) open(device string) (*generate.Model, error) {
	if s.from != "" && hf.IsFolder(s.from) {
		if err := mlx.Do(func() error { return mlx.UseDevice(device) }); err != nil {
			return nil, err
		}
		return generate.OpenFolder(s.from, s.dtype, folderTokenizer)
	}
	if s.from != "" && hf.IsGGUF(s.from) {
		if err := mlx.Do(func() error { return mlx.UseDevice(device) }); err != nil {
			return nil, err
		}
		return openGGUF(s.from, s.dtype)
	}
	return runfolder.OpenGenerator(s.from, s.adapter, device, openTokenizer)
}

// openGGUF opens the model of a GGUF file in compute dtype dtype (""
// for float32) with the tokenizer, chat template and end tokens its
// metadata describes, on the current device.
func openGGUF(path, dtype string) (*generate.Model, error) {
	m, err := hf.LoadGGUF(path, dtype)
	if err != nil {
		return nil, err
	}
	var (
		tok  data.Tokenizer
		tmpl *chattemplate.Template
		ends []int32
	)
	err = withGGUFTokenizerFiles(path, m, func(dir string) error {
		var err error
		if tok, err = folderTokenizer(dir, m.Family, m.Model.Model.Config.VocabSize); err != nil {
			return err
		}
		if tmpl, err = generate.OpenTemplate(dir); err != nil {
			return err
		}
		ends, err = generate.EndTokens(tok, tmpl, dir)
		return err
	})
	if err != nil {
		m.Free()
		return nil, err
	}
	return generate.NewModel(m.Model.Model, m.Params, tok, tmpl, ends, m.Free), nil
}
