package train

import (
	"fmt"
	"path/filepath"

	"github.com/posttrainllm/posttrainllm/checkpoint"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/peft"
)

// Adapted is a model with the parameters a fine-tune checkpoint computes
// with: for adapters, the base's parameters with the adapters applied
// (peft.Adapter.Effective); for a full fine-tune, its own parameters.
type Adapted struct {
	Dir      string // the fine-tune checkpoint
	State    RunState
	FineTune FineTuneConfig
	Model    *model.TinyGPT
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
	ft, err := ReadFineTuneConfig(dir)
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
	if a.State, err = ReadRunState(filepath.Join(dir, checkpoint.StateFile)); err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	st, m, params, free, err := loadModel(baseDir)
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
	if ft.Quantize > 0 {
		// The adapters were trained over the quantized base: apply them to it.
		if a.Base, err = quantizeBase(a.Adapter, m, a.Base, ft); err != nil {
			return nil, err
		}
		frozen := a.Base
		a.free = append(a.free, func() { mlx.Free(frozen[len(m.Specs):]...); freeAt(frozen, a.Adapter.Quant.Indices) })
	}
	if a.Adapters, err = checkpoint.LoadNamed(filepath.Join(dir, checkpoint.AdapterFile), a.Adapter.Names(), specShapes(a.Adapter.Specs)); err != nil {
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
		tok, err := openRunTokenizer(opts.Tokenizers, a.State.Config, checkpoint.RunDirOf(a.Dir))
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

// Fuse writes the model of a fine-tune checkpoint (LoadAdapted's path and
// base) as an ordinary checkpoint under the run folder out: the base with
// the adapters merged in (peft.Adapter.Fuse; a base the adapters were
// trained over quantized is dequantized first), in float, the settings of the
// fine-tune's run, step 0 and a fresh optimizer state, so sample, eval
// and train open it like any other checkpoint. It returns the checkpoint
// directory.
func Fuse(path, base, out string) (string, error) {
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
		opt, err := NewOptimizer(cfg, a.Model.Specs)
		if err != nil {
			return err
		}
		state, err := opt.Init()
		if err != nil {
			return err
		}
		defer mlx.Free(state...)
		names := make([]string, len(a.Model.Specs))
		for i, s := range a.Model.Specs {
			names[i] = s.Name
		}
		if dir, err = saveCheckpoint(checkpoint.Root(out), RunState{Config: cfg}, names, params, opt.StateNames(), state); err != nil {
			return err
		}
		return copyTokenizerDir(checkpoint.RunDirOf(a.Dir), out)
	})
	return dir, err
}

// freeAt frees the arrays of list at the indices.
func freeAt(list []*mlx.Array, indices []int) {
	for _, i := range indices {
		list[i].Free()
	}
}
