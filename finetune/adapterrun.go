package finetune

import (
	"fmt"
	"path/filepath"

	"github.com/posttrainllm/posttrainllm/checkpoint"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/peft"
	"github.com/posttrainllm/posttrainllm/train"
)

// AdapterRun is the adapters of a LoRA or DoRA fine-tune loaded on their
// own, to be applied to a base model held elsewhere (a server's batched
// engine, which applies each request's adapter) instead of merged into a
// copy of it as LoadAdapted does.
type AdapterRun struct {
	Dir      string // the fine-tune checkpoint
	FineTune Config
	// Adapter lays the adapters out over the base's parameters; Params
	// are their arrays in Adapter.Specs order.
	Adapter *peft.Adapter
	Params  []*mlx.Array
}

// LoadAdapterRun opens the adapters of the fine-tune checkpoint at path
// (a checkpoint directory or a fine-tune's run folder, its newest
// checkpoint) for a base model laid out as specs. A full fine-tune has no
// adapters and is refused; so is one that quantized its base itself
// (quantize in finetune.json): its adapters compute over the quantized
// weights, not the float ones a server holds. Adapters trained over a
// checkpoint stored quantized apply to its dequantized weights, which is
// what the quantized products compute. The caller frees it.
func LoadAdapterRun(path string, specs []model.ParamSpec) (*AdapterRun, error) {
	dir, err := checkpoint.Resolve(path)
	if err != nil {
		return nil, err
	}
	ft, err := ReadConfig(dir)
	if err != nil {
		return nil, err
	}
	if !ft.UsesAdapter() {
		return nil, fmt.Errorf("%s is a full fine-tune (method %s): it has no adapters to apply to a base; serve it with --from", dir, ft.Method)
	}
	if ft.Quantize != 0 {
		return nil, fmt.Errorf("%s trained its adapters over its base quantized to %d bits, which a float base does not compute: merge them with posttrainllm fuse --adapter %s and serve the result", dir, ft.Quantize, path)
	}
	a, err := peft.New(ft.Adapter(), specs)
	if err != nil {
		return nil, fmt.Errorf("the adapters of %s do not fit the base: %w", dir, err)
	}
	params, err := checkpoint.LoadNamed(filepath.Join(dir, checkpoint.AdapterFile), a.Names(), train.SpecShapes(a.Specs))
	if err != nil {
		return nil, fmt.Errorf("the adapters of %s do not fit the base: %w", dir, err)
	}
	return &AdapterRun{Dir: dir, FineTune: ft, Adapter: a, Params: params}, nil
}

// Free releases the arrays. Freeing a nil AdapterRun is a no-op.
func (r *AdapterRun) Free() {
	if r == nil {
		return
	}
	mlx.Do(func() error { mlx.Free(r.Params...); return nil })
	r.Params = nil
}
