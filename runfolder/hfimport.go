package runfolder

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/posttrainllm/posttrainllm/checkpoint"
	"github.com/posttrainllm/posttrainllm/hf"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/peft"
	"github.com/posttrainllm/posttrainllm/train"
)

// ImportOptions say how a Hugging Face folder becomes a run.
type ImportOptions struct {
	// Dtype is the model's compute dtype ("" for float32); parameters are
	// stored in it unless the base config keeps float32 masters.
	Dtype string
	// Context is the longest sequence the run trains on and samples; 0
	// keeps the folder's (n_positions, max_position_embeddings). Models
	// with learned positions keep the folder's.
	Context int
}

// ImportHF reads the Hugging Face folder src and writes it as the step-0
// checkpoint of a new run folder out, with base's training settings
// (optimizer, schedule, batch, tokenizer, …) and the folder's model. It
// writes no optimizer state: a fine-tune makes its own, and train --resume
// starts the optimizer fresh and saves its state with the first
// checkpoint, so sample, eval, finetune --from and train --resume accept
// the run as they accept a trained one. The folder's tokenizer files are
// copied to out/hf-tokenizer. An MLX-quantized folder's block projections
// stay quantized (hf.LoadQuantized): the run's base is a quantized model
// (see CheckpointQuantization). out must not exist or be empty. It
// returns the checkpoint directory and the model's family.
func ImportHF(src, out string, base train.Config, opts ImportOptions) (dir, family string, err error) {
	if entries, err := os.ReadDir(out); err == nil && len(entries) > 0 {
		return "", "", fmt.Errorf("import: %s exists and is not empty; choose a new run folder", out)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(out) // it was missing or empty: a failed import leaves nothing
		}
	}()
	loaded, err := hf.LoadQuantized(src, opts.Dtype)
	if err != nil {
		return "", "", err
	}
	defer loaded.Free()
	files, err := hf.FindTokenizerFiles(src)
	if err != nil {
		return "", "", fmt.Errorf("import: the tokenizer files: %w", err)
	}
	dir, err = importModel(loaded, out, base, opts, func(tokDir string) error {
		for _, f := range files {
			if err := hf.CopyFile(f, filepath.Join(tokDir, filepath.Base(f))); err != nil {
				return err
			}
		}
		return nil
	}, len(files) > 0)
	if err != nil {
		return "", "", err
	}
	if base.Tokenizer == train.HFTokenizer {
		if _, err := os.Stat(train.HFTokenizerPath(out)); err != nil {
			return "", "", fmt.Errorf("import: tokenizer %s: %s has no tokenizer.json", train.HFTokenizer, src)
		}
	}
	return dir, loaded.Family, nil
}

// importModel writes loaded as the step-0 checkpoint of the run folder
// out, with base's training settings and no optimizer state, and when
// hasTokenizer, calls writeTokenizer to fill out's train.TokenizerDir.
func importModel(loaded *hf.Model, out string, base train.Config, opts ImportOptions, writeTokenizer func(dir string) error, hasTokenizer bool) (string, error) {
	cfg := base
	cfg.Model = loaded.Model.Config
	cfg.Model.MasterFP32 = base.Model.MasterFP32 && cfg.Model.Dtype != "float32"
	if opts.Context > 0 && opts.Context != cfg.Model.Context {
		if cfg.Model.Positions == model.PositionsLearned {
			return "", fmt.Errorf("import: context %d: a %s model's learned position table fixes its context at %d",
				opts.Context, loaded.Family, cfg.Model.Context)
		}
		cfg.Model.Context = opts.Context
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return "", fmt.Errorf("import: %w", err)
	}
	if err := cfg.CheckMemory(); err != nil {
		return "", fmt.Errorf("import: %w", err)
	}
	m, err := model.New(cfg.Model)
	if err != nil {
		return "", fmt.Errorf("import: %w", err)
	}
	var dir string
	err = mlx.Do(func() error {
		s := mlx.NewScope()
		defer s.Close()
		params := slices.Clone(loaded.Params)
		want := m.Config.ParamDtype()
		if params[0].Dtype() != want {
			params = make([]*mlx.Array, len(loaded.Params))
			for i, p := range loaded.Params {
				if p.Dtype() == mlx.Uint32 { // a packed quantized weight
					params[i] = p
				} else {
					params[i] = mlx.AsType(p, want)
				}
			}
		}
		names := make([]string, len(m.Specs))
		for i, s := range m.Specs {
			names[i] = s.Name
		}
		if q := loaded.Quant; q != nil {
			for k, i := range q.Indices {
				stem := peft.QuantStem(names[i])
				names = append(names, stem+peft.ScalesSuffix, stem+peft.BiasesSuffix)
				params = append(params, mlx.AsType(q.Scales[k], want), mlx.AsType(q.Biases[k], want))
			}
		}
		var err error
		dir, err = train.SaveCheckpoint(checkpoint.Root(out), train.RunState{Step: 0, Config: cfg}, names, params, nil, nil)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("import: %w", err)
	}
	if hasTokenizer {
		tokDir := filepath.Join(out, train.TokenizerDir)
		err := os.MkdirAll(tokDir, 0o755)
		if err == nil {
			err = writeTokenizer(tokDir)
		}
		if err != nil {
			return "", fmt.Errorf("import: the tokenizer files: %w", err)
		}
	}
	return dir, nil
}

// ExportHF writes the model of a checkpoint (path as checkpoint.Resolve
// takes it) as a Hugging Face folder dst that transformers loads, with the
// tokenizer files the run was imported with. A quantized model (imported
// from an MLX-quantized folder, or fused with --quantize) is written in
// the layout mlx-lm reads (hf.SaveQuantized). It returns the family.
func ExportHF(path, dst string) (string, error) {
	dir, err := checkpoint.Resolve(path)
	if err != nil {
		return "", err
	}
	var family string
	err = mlx.Do(func() error {
		_, m, params, q, free, err := loadModelQuant(dir)
		if err != nil {
			return err
		}
		defer free()
		// A checkpoint directory is RUN/checkpoints/step-N.
		files, err := hf.FindTokenizerFiles(filepath.Join(dir, "..", "..", train.TokenizerDir))
		if err != nil {
			return err
		}
		if q == nil {
			family, err = hf.Save(dst, m, params, files...)
			return err
		}
		n := len(q.Base)
		hq := &hf.QuantizedParams{Quantization: hf.Quantization{GroupSize: q.GroupSize, Bits: q.Bits}, Indices: q.Indices}
		for k := range q.Indices {
			hq.Scales = append(hq.Scales, params[n+2*k])
			hq.Biases = append(hq.Biases, params[n+2*k+1])
		}
		family, err = hf.SaveQuantized(dst, m, params[:n], hq, files...)
		return err
	})
	return family, err
}
