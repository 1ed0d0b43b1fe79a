package peft

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
)

// Adapter is a Config resolved against a model's parameter layout: which
// base parameters it adapts and the layout of its own parameters.
type Adapter struct {
	Config Config
	// Base is the model's parameter layout (model.Config.Specs).
	Base []model.ParamSpec
	// Targets are the indices into Base of the adapted projections, in
	// Base order.
	Targets []int
	// Specs lay out the adapter's own parameters, all float32, per target
	// in order: "<name>.lora_A" [r, in], "<name>.lora_B" [out, r] and, for
	// DoRA, "<name>.magnitude" [out], where <name> is the target's name
	// without ".weight" (blocks.0.attn.wq.lora_A), as in Hugging Face PEFT.
	Specs []model.ParamSpec
	// Quant is the quantized layout of the frozen base the adapters train
	// over (QuantizeBase); nil for a float base.
	Quant *Quantized
	// PerProjection makes Linears give every adapted projection a Linear
	// of its own (ProjectionLinears) instead of grouping those that share
	// their input (GroupedLinears). Both compute the same function;
	// grouping takes fewer operations, which a GPU step is bound by, and
	// holds each group's stacked frozen weights while its product runs,
	// which costs memory and saves no time on the CPU.
	PerProjection bool
	// DequantizedProducts makes the products over a quantized base (Quant)
	// float matmuls against each weight dequantized where it is used,
	// instead of MLX's quantized matmuls, for weights of up to 32 MiB in
	// float (the block projections; token tables keep the quantized
	// matmul). The dequantized weight lives while its product runs and is
	// formed again for the backward pass. For training: MLX's quantized
	// matmul on the CPU is far slower than its float GEMM (221 against
	// 6.4 ms for 384 rows through a 1,536 × 576 4-bit weight), and slower
	// on a CUDA GPU too (docs/finetuning.md); a decoder's one row per step
	// is better served by the quantized matmul.
	DequantizedProducts bool
	// DequantizedHead makes a quantized output head (the tied token
	// embedding or an untied head) dequantized whole once per pass of the
	// chunked loss (model.Linear.Dense) and multiplied as a float weight,
	// instead of MLX's quantized matmuls chunk by chunk. Its float copy
	// (272 MB in bf16 for Qwen2.5-0.5B's tied table) lives while the loss
	// runs. On an H200 it made a Qwen2.5-0.5B-shaped QLoRA update 1.4–1.6×
	// faster and its peak 1.6–2.1 GiB lower, the chunks' quantized matmuls
	// holding more while queued than the one float table; on the CPU,
	// whose dequantize holds several times its output, it raises the peak
	// (docs/performance/memory.md).
	DequantizedHead bool
}

// perTarget is the number of adapter arrays per adapted projection.
func (a *Adapter) perTarget() int {
	if a.Config.Method == DoRA {
		return 3
	}
	return 2
}

// New resolves cfg against base, the model's parameter layout. Every
// target name must select at least one matrix, and the rank may not exceed
// a selected projection's smaller side (B·A would then be no low-rank
// update).
func New(cfg Config, base []model.ParamSpec) (*Adapter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	want := cfg.projections()
	used := map[string]bool{}
	a := &Adapter{Config: cfg, Base: base}
	for i, s := range base {
		p := projectionName(s.Name)
		if s.Kind != model.Matrix || len(s.Shape) != 2 || !want[p] {
			continue
		}
		used[p] = true
		out, in := s.Shape[0], s.Shape[1]
		if cfg.Rank > min(out, in) {
			return nil, fmt.Errorf("peft: rank %d exceeds %s's smaller side (shape %v)", cfg.Rank, s.Name, s.Shape)
		}
		a.Targets = append(a.Targets, i)
		stem := strings.TrimSuffix(s.Name, ".weight")
		a.Specs = append(a.Specs,
			model.ParamSpec{Name: stem + ".lora_A", Shape: []int{cfg.Rank, in}, Kind: model.Matrix},
			model.ParamSpec{Name: stem + ".lora_B", Shape: []int{out, cfg.Rank}, Kind: model.Matrix})
		if cfg.Method == DoRA {
			a.Specs = append(a.Specs, model.ParamSpec{Name: stem + ".magnitude", Shape: []int{out}, Kind: model.Norm})
		}
	}
	var missing []string
	for _, t := range cfg.Targets {
		t = strings.TrimSpace(t)
		g, isGroup := targetGroups[t]
		if !isGroup {
			g = []string{t}
		}
		if !slices.ContainsFunc(g, func(p string) bool { return used[p] }) {
			missing = append(missing, t)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("peft: target %s selects no matrix of this model; want attn, mlp, all or a projection name such as wq, wk, wv, wo, w1, w2",
			strings.Join(missing, ", "))
	}
	return a, nil
}

// NumParams counts the adapter's parameters.
func (a *Adapter) NumParams() int {
	n := 0
	for _, s := range a.Specs {
		n += s.Size()
	}
	return n
}

// Names returns the adapter parameters' names in Specs order.
func (a *Adapter) Names() []string {
	names := make([]string, len(a.Specs))
	for i, s := range a.Specs {
		names[i] = s.Name
	}
	return names
}

// Init returns fresh adapter parameters in Specs order: A uniform in
// ±1/√in (PEFT's and mlx-lm's initialisation), B zero, and for DoRA the
// magnitude m = ‖W0‖ per output row of the base weights (dequantized for
// a quantized base), so the effective
// parameters start equal to the base. The same seed gives the same arrays.
func (a *Adapter) Init(seed uint64, base []*mlx.Array) ([]*mlx.Array, error) {
	if a.Quant != nil {
		if err := a.Quant.check(base); err != nil {
			return nil, err
		}
	} else if len(base) != len(a.Base) {
		return nil, fmt.Errorf("peft: got %d base arrays, the model has %d parameters", len(base), len(a.Base))
	}
	var out []*mlx.Array
	err := mlx.Do(func() error {
		s := mlx.NewScope()
		defer s.Close()
		if a.Quant != nil {
			base = a.Quant.Dequantize(base) // DoRA's magnitudes are those of the weights it adapts
		}
		keys := mlx.RandomSplit(mlx.RandomKey(seed), len(a.Targets))
		for k, i := range a.Targets {
			out0, in := a.Base[i].Shape[0], a.Base[i].Shape[1]
			bound := float32(1 / math.Sqrt(float64(in)))
			out = append(out,
				mlx.RandomUniform([]int{a.Config.Rank, in}, mlx.Float32, -bound, bound, keys[k]),
				mlx.Zeros([]int{out0, a.Config.Rank}, mlx.Float32))
			if a.Config.Method == DoRA {
				out = append(out, rowNorm(mlx.AsType(base[i], mlx.Float32)))
			}
		}
		if err := mlx.Eval(out...); err != nil {
			return fmt.Errorf("peft: init: %w", err)
		}
		s.Keep(out...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// rowNorm is ‖w‖ over each row of a matrix [out, in]: [out].
func rowNorm(w *mlx.Array) *mlx.Array { return mlx.Sqrt(mlx.Sum(mlx.Square(w), 1)) }

// Effective returns the merged parameters: base with every target
// replaced by its adapted weight, in the base's dtype (a quantized base,
// Quant, dequantized first). It computes what the unmerged Linears
// compute, up to float rounding, and is what Fuse writes. It is a pure
// function of its arguments and traces into a compiled step; untouched
// entries are the base arrays themselves. The adapted weight is computed
// in float32 and cast once.
func (a *Adapter) Effective(base, adapter []*mlx.Array) []*mlx.Array {
	if err := a.check(base, adapter); err != nil {
		out := slices.Clone(base[:min(len(base), len(a.Base))])
		for _, i := range a.Targets {
			if i < len(out) {
				out[i] = mlx.ErrorArray(err)
			}
		}
		return out
	}
	if a.Quant != nil {
		base = a.Quant.Dequantize(base)
	}
	out := slices.Clone(base)
	k := a.perTarget()
	scale := a.Config.Scale()
	for j, i := range a.Targets {
		ad := adapter[j*k : (j+1)*k]
		w := mlx.Add(mlx.AsType(base[i], mlx.Float32), mlx.MulScalar(mlx.Matmul(ad[1], ad[0]), scale))
		if a.Config.Method == DoRA {
			w = mlx.Multiply(w, mlx.ExpandDims(mlx.Divide(ad[2], rowNorm(w)), 1))
		}
		out[i] = mlx.AsType(w, base[i].Dtype())
	}
	return out
}

// check refuses lists of the wrong length.
func (a *Adapter) check(base, adapter []*mlx.Array) error {
	if a.Quant != nil {
		if err := a.Quant.check(base); err != nil {
			return err
		}
	} else if len(base) != len(a.Base) {
		return fmt.Errorf("peft: got %d base arrays, the model has %d parameters", len(base), len(a.Base))
	}
	if len(adapter) != len(a.Specs) {
		return fmt.Errorf("peft: got %d adapter arrays, the adapter has %d", len(adapter), len(a.Specs))
	}
	return nil
}

// Fuse returns the effective parameters, evaluated, as arrays the caller
// owns: the weights of an ordinary checkpoint that computes what base plus
// adapter compute.
func (a *Adapter) Fuse(base, adapter []*mlx.Array) ([]*mlx.Array, error) {
	if err := a.check(base, adapter); err != nil {
		return nil, err
	}
	var out []*mlx.Array
	err := mlx.Do(func() error {
		s := mlx.NewScope()
		defer s.Close()
		eff := a.Effective(base, adapter)
		out = make([]*mlx.Array, len(eff))
		for i, e := range eff {
			out[i] = mlx.Copy(e) // untouched entries too: the caller owns every array
		}
		if err := mlx.Eval(out...); err != nil {
			return fmt.Errorf("peft: fuse: %w", err)
		}
		s.Keep(out...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
