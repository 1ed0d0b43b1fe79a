package step

// The flat layout of the step: with an elementwise optimizer (optim.Flat)
// the parameters, their compute copies, gradients and optimizer state are
// held as one flat array per group, so an update launches kernels per
// group rather than per parameter. body and apply hand over to these
// functions when the step has a flat layout.

import (
	"fmt"
	"slices"

	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/optim"
)

// flatUpdate is update over the flat layout, given the float32 sums of
// the microbatches' gradients per group (groupGrads): the norm reduces
// them as they are, and the optimizer runs once per group. The mean over
// the microbatches and the clipping scale are one 0-D factor that MLX's
// compiler fuses into each group's update kernel.
func (s *Step) flatUpdate(params, grads, state []*mlx.Array, lr *mlx.Array, sums []*mlx.Array) (newParams, newState, means []*mlx.Array, norm *mlx.Array, err error) {
	grads, sums = reduceAcrossRanks(s.opts.Group, grads, sums, !s.weighted)
	k := s.meanFactor()
	means = sums
	var scale *mlx.Array // nil: the gradients as they are
	norm = optim.GlobalNorm(grads)
	if k != 1 {
		means = make([]*mlx.Array, len(sums))
		for j, a := range sums {
			means[j] = mlx.MulScalar(a, k)
		}
		norm = mlx.MulScalar(norm, k)
		scale = mlx.Scalar(k, mlx.Float32)
	}
	if s.opts.GradClip > 0 {
		clip := optim.ClipScale(norm, s.opts.GradClip)
		if scale == nil {
			scale = clip
		} else {
			scale = mlx.Multiply(scale, clip)
		}
	}
	groupGrads := grads
	if scale != nil {
		groupGrads = make([]*mlx.Array, len(grads))
		for g, gr := range grads {
			groupGrads[g] = mlx.Multiply(gr, scale)
		}
	}
	newParams, newState, err = s.flat.Optimizer().Update(params, groupGrads, state, lr)
	return newParams, newState, means, norm, err
}

// layoutSizes returns how many parameter, copy and optimizer-state arrays
// the step takes and emits: per parameter, or per group of the flat
// layout.
func (s *Step) layoutSizes() (params, copies, state int) {
	if s.flat == nil {
		return s.nParams, s.nCopies, s.nState
	}
	g := s.flat.Groups()
	if s.nCopies > 0 {
		copies = g
	}
	return g, copies, 1 + g*(s.nState-1)/s.nParams
}

// layoutFor returns the flat layout for parameters params (nil when the
// optimizer runs per parameter), building it from their dtypes the first
// time: a step's compiled function has one layout for its whole life.
func (s *Step) layoutFor(params []*mlx.Array) (*optim.Flat, error) {
	if _, ok := s.opt.(optim.Elementwise); !ok {
		return nil, nil
	}
	dtypes := make([]mlx.Dtype, len(params))
	for i, p := range params {
		dtypes[i] = p.Dtype()
	}
	if s.flat == nil {
		flat, err := optim.NewFlat(s.opt, dtypes)
		if err != nil {
			return nil, fmt.Errorf("step: %w", err)
		}
		s.flat = flat
	}
	if want := s.flat.Dtypes(); !slices.Equal(dtypes, want) {
		return nil, fmt.Errorf("step: parameters of dtypes %v for a step laid out for %v", dtypes, want)
	}
	return s.flat, nil
}

// applyLayout is apply on arrays already in the step's layout (per
// parameter, or the flat layout's groups): what a State holds.
func (s *Step) applyLayout(params, copies, frozen, state []*mlx.Array, lr *mlx.Array, batch ...*mlx.Array) (stepOutputs, error) {
	P, C, S := s.layoutSizes()
	if len(params) != P || len(state) != S || len(frozen) != s.nFrozen {
		return stepOutputs{}, fmt.Errorf("step: step got %d params, %d frozen and %d state arrays, laid out for %d, %d and %d",
			len(params), len(frozen), len(state), P, s.nFrozen, S)
	}
	if err := s.checkBatch(lr, batch); err != nil {
		return stepOutputs{}, err
	}
	if s.weighted {
		if len(batch) < 3 {
			return stepOutputs{}, fmt.Errorf("step: a weighted step needs loss weights")
		}
		if err := checkWeights(batch[2], batch[0]); err != nil {
			return stepOutputs{}, err
		}
	}
	if err := s.checkRowInputs(batch); err != nil {
		return stepOutputs{}, err
	}
	if err := s.checkSegments(batch); err != nil {
		return stepOutputs{}, err
	}
	var cast []*mlx.Array
	if C > 0 && copies == nil {
		cast = make([]*mlx.Array, len(params))
		for i, p := range params {
			cast[i] = mlx.AsType(p, s.opts.ComputeDtype)
		}
		copies = cast
	}
	if len(copies) != C {
		return stepOutputs{}, fmt.Errorf("step: step got %d parameter copies, laid out for %d", len(copies), C)
	}
	in := make([]*mlx.Array, 0, P+C+s.nFrozen+S+1+len(batch))
	in = append(append(append(append(append(append(in, params...), copies...), frozen...), state...), lr), batch...)
	out, err := s.call(in)
	// The outputs' graph holds what it needs of the inputs.
	mlx.Free(cast...)
	if err != nil {
		return stepOutputs{}, fmt.Errorf("step: step: %w", err)
	}
	return stepOutputs{params: out[:P:P], copies: out[P : P+C : P+C], state: out[P+C : P+C+S : P+C+S],
		loss: out[P+C+S], gradNorm: out[P+C+S+1], aux: out[P+C+S+2:]}, nil
}
