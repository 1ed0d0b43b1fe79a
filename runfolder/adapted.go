package runfolder

import (
	"fmt"
	"path/filepath"

	"github.com/posttrainllm/posttrainllm/checkpoint"
	"github.com/posttrainllm/posttrainllm/finetune"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/peft"
	"github.com/posttrainllm/posttrainllm/train"
)

// Adapted is a model with the parameters a fine-tune checkpoint computes
// with: for adapters, the base's parameters with the adapters applied
// (peft.Adapter.Effective); for a full fine-tune, its own parameters.
type Adapted struct {
	Dir      string // the fine-tune checkpoint
	State    train.RunState
	FineTune finetune.Config
	Model    *model.Transformer
	Adapter  *peft.Adapter // nil for a full fine-tune
	// Base and Adapters are the arrays loaded; Params the effective
	// parameters computed from them, evaluated.
	Base, Adapters, Params []*mlx.Array
	free                   []func()
}

// LoadAdapted opens the fine-tune checkpoint at path (a checkpoint
// directory or a fine-tune's run folder, its newest checkpoint) together
// with its base: base, when not empty, overrides the base checkpoint
// recorded in finetune.json (a run folder or a checkpoint directory). The
// caller frees it.
func LoadAdapted(path, base string) (*Adapted, error) {
	var a *Adapted
	err := mlx.Do(func() error {
		var err error
		a, err = loadAdapted(path, base)
		return err
	})
	return a, err
}

// loadAdapted is LoadAdapted on the MLX thread.
func loadAdapted(path, base string) (_ *Adapted, err error) {
	dir, err := checkpoint.Resolve(path)
	if err != nil {
		return nil, err
	}
	ft, err := finetune.ReadConfig(dir)
	if err != nil {
		return nil, err
	}
	a := &Adapted{Dir: dir, FineTune: ft}
	defer func() {
		if err != nil {
			a.Free()
		}
	}()
	if !ft.UsesAdapter() {
		st, m, params, free, err := loadModel(dir)
		if err != nil {
			return nil, err
		}
		a.State, a.Model, a.Params, a.free = st, m, params, []func(){free}
		return a, nil
	}
	if base == "" {
		base = ft.Base
	}
	baseDir, err := checkpoint.Resolve(base)
	if err != nil {
		return nil, fmt.Errorf("base of %s: %w", dir, err)
	}
	if a.State, err = train.ReadRunState(filepath.Join(dir, checkpoint.StateFile)); err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	st, m, params, quant, free, err := loadModelQuant(baseDir)
	if err != nil {
		return nil, fmt.Errorf("base: %w", err)
	}
	a.Model, a.Base, a.free = m, params, []func(){free}
	if st.Config.Model != a.State.Config.Model {
		return nil, fmt.Errorf("base %s is of another model shape (%+v) than the fine-tune %s (%+v)",
			baseDir, st.Config.Model, dir, a.State.Config.Model)
	}
	if a.Adapter, err = peft.New(ft.Adapter(), m.Specs); err != nil {
		return nil, err
	}
	if quant != nil {
		if ft.Quantize != 0 {
			return nil, fmt.Errorf("base %s is quantized already (%s), the fine-tune %s quantized its base itself (quantize %d); pass the float base with --from",
				baseDir, quant, dir, ft.Quantize)
		}
		// The adapters were trained over this quantized base: apply them to it.
		a.Adapter.Quant = quant
	} else if ft.Quantize > 0 {
		// The adapters were trained over the quantized base: apply them to it.
		if a.Base, err = finetune.QuantizeBase(a.Adapter, m, a.Base, ft); err != nil {
			return nil, err
		}
		frozen := a.Base
		a.free = append(a.free, func() { mlx.Free(frozen[len(m.Specs):]...); freeAt(frozen, a.Adapter.Quant.Indices) })
	}
	if a.Adapters, err = checkpoint.LoadNamed(filepath.Join(dir, checkpoint.AdapterFile), a.Adapter.Names(), train.SpecShapes(a.Adapter.Specs)); err != nil {
		return nil, err
	}
	eff := a.Adapter.Effective(a.Base, a.Adapters)
	if err := mlx.Eval(eff...); err != nil {
		return nil, fmt.Errorf("applying the adapters of %s: %w", dir, err)
	}
	a.Params = eff
	return a, nil
}

// Free releases the arrays. Freeing a nil Adapted is a no-op.
func (a *Adapted) Free() {
	if a == nil {
		return
	}
	mlx.Do(func() error {
		for i, p := range a.Params {
			if a.Adapter != nil && (i >= len(a.Base) || p != a.Base[i]) {
				p.Free() // the adapted and dequantized ones; the rest are Base's
			}
		}
		mlx.Free(a.Adapters...)
		for _, f := range a.free {
			f()
		}
		a.Params, a.Base, a.Adapters, a.free = nil, nil, nil, nil
		return nil
	})
}

// SampleAdapted continues prompt with the model of a fine-tune
// checkpoint (LoadAdapted's path and base), as SampleCheckpoint does for
// a plain one.
func SampleAdapted(path, base, prompt, device string, opts SampleOptions) (string, error) {
	var text string
	err := mlx.Do(func() error {
		if err := opts.Validate(); err != nil {
			return err
		}
		if err := mlx.UseDevice(device); err != nil {
			return err
		}
		a, err := loadAdapted(path, base)
		if err != nil {
			return err
		}
		defer a.Free()
		tok, err := train.OpenRunTokenizer(opts.Tokenizers, a.State.Config, checkpoint.RunDirOf(a.Dir))
		if err != nil {
			return fmt.Errorf("checkpoint %s: %w", a.Dir, err)
		}
		out, err := Generate(a.Model, a.Params, encodePrompt(tok, prompt, opts), opts)
		if err != nil {
			return err
		}
		text = tok.Decode(out)
		return nil
	})
	return text, err
}

// FuseOptions say how Fuse stores the merged weights.
type FuseOptions struct {
	// Quantize, when not 0, re-quantizes the merged transformer-block
	// projections, the token embedding and an untied head to this many bits (MLX's affine mode, groups of
	// QGroupSize, 0 meaning DefaultQuantGroupSize); 0 writes float
	// weights.
	Quantize, QGroupSize int
}

// Validate reports settings MLX's quantization does not take.
func (o FuseOptions) Validate() error {
	if o.Quantize == 0 {
		if o.QGroupSize != 0 {
			return fmt.Errorf("q_group_size %d without quantize: set the bits too", o.QGroupSize)
		}
		return nil
	}
	if err := mlx.CheckQuantization(o.groupSize(), o.Quantize); err != nil {
		return fmt.Errorf("quantize %d, q_group_size %d: %w", o.Quantize, o.groupSize(), err)
	}
	return nil
}

// groupSize is QGroupSize or its default.
func (o FuseOptions) groupSize() int {
	if o.QGroupSize == 0 {
		return finetune.DefaultQuantGroupSize
	}
	return o.QGroupSize
}

// Fuse writes the model of a fine-tune checkpoint (LoadAdapted's path and
// base) as an ordinary checkpoint under the run folder out: the base with
// the adapters merged in (peft.Adapter.Fuse; a base the adapters were
// trained over quantized is dequantized first), the settings of the
// fine-tune's run, step 0. Without opts.Quantize the weights are float
// and a fresh optimizer state is written, so sample, eval and train open
// it like any other checkpoint; with it the merged block projections are
// quantized again, which sample, eval, export and adapter fine-tunes
// read (and a full fine-tune refuses), without optimizer state. It
// returns the checkpoint directory.
func Fuse(path, base, out string, opts FuseOptions) (string, error) {
	if err := opts.Validate(); err != nil {
		return "", fmt.Errorf("fuse: %w", err)
	}
	var dir string
	err := mlx.Do(func() error {
		a, err := loadAdapted(path, base)
		if err != nil {
			return err
		}
		defer a.Free()
		params := a.Params
		if a.Adapter != nil {
			fused, err := a.Adapter.Fuse(a.Base, a.Adapters)
			if err != nil {
				return err
			}
			defer mlx.Free(fused...)
			params = fused
		}
		cfg := a.State.Config
		names := make([]string, len(a.Model.Specs))
		for i, s := range a.Model.Specs {
			names[i] = s.Name
		}
		if opts.Quantize > 0 {
			q, frozen, err := peft.QuantizeBase(a.Model.Specs, params, opts.groupSize(), opts.Quantize)
			if err != nil {
				return fmt.Errorf("fuse: %w", err)
			}
			defer freeAt(frozen, q.Indices)
			defer mlx.Free(frozen[len(q.Base):]...)
			if dir, err = train.SaveCheckpoint(checkpoint.Root(out), train.RunState{Config: cfg}, q.Names(), frozen, nil, nil); err != nil {
				return err
			}
			return train.CopyTokenizerDir(checkpoint.RunDirOf(a.Dir), out)
		}
		opt, err := train.NewOptimizer(cfg, a.Model.Specs)
		if err != nil {
			return err
		}
		state, err := opt.Init()
		if err != nil {
			return err
		}
		defer mlx.Free(state...)
		if dir, err = train.SaveCheckpoint(checkpoint.Root(out), train.RunState{Config: cfg}, names, params, opt.StateNames(), state); err != nil {
			return err
		}
		return train.CopyTokenizerDir(checkpoint.RunDirOf(a.Dir), out)
	})
	return dir, err
}

// freeAt frees the arrays of list at the indices.
func freeAt(list []*mlx.Array, indices []int) {
	for _, i := range indices {
		list[i].Free()
	}
}
