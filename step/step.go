package step

import (
	"fmt"
	"math"
	"slices"

	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/optim"
)

// StepOptions fix the shape of the traced step.
type StepOptions struct {
	// Accum is the number N of microbatches per optimizer update. The loop
	// over them unrolls at trace time, so N is part of the compiled function.
	Accum int
	// GradClip clips the averaged gradients to this global norm; 0 disables.
	GradClip float64
	// Compile traces the step once and replays it; false runs it eagerly
	// every call (the interpreted mode, for A/B comparisons).
	Compile bool
	// ComputeCopies makes the step take copies of the parameters cast to
	// ComputeDtype as inputs of their own: the loss is called with, and
	// differentiated with respect to, the copies, and the step emits the
	// next update's copies, cast from the new parameters inside the traced
	// function; the float32 masters feed only the optimizer. Why: each cast
	// then fuses into the optimizer's update kernel instead of launching a
	// kernel per parameter and step (docs/performance/gpu.md). Gradients are
	// unchanged; the copies cost parameters × ComputeDtype.Size() bytes. A
	// State carries them from one update to the next; Step.Run alone casts
	// the parameters itself every call.
	ComputeCopies bool
	// ComputeDtype is the dtype of the copies (a float type); it is read
	// only with ComputeCopies. mlx.Dtype's zero value is mlx.Bool, a real
	// dtype, hence the separate switch.
	ComputeDtype mlx.Dtype
	// Group is the data-parallel group the step averages over: after its
	// own microbatches, each rank's float32 gradients and loss are summed
	// across the group in one flattened all-reduce inside the traced
	// function and divided by its size, so every rank applies the same
	// update, that of the union of the ranks' batches. nil or a size-1
	// group leaves the step as it is without one.
	Group *mlx.Group

	// StackedParams lists runs of consecutive parameter indices whose
	// arrays the loss also accepts stacked along axis 0 into one array,
	// passed in the run's first slot with nil in the others
	// (model.Config.QKVRuns gives Transformer's q/k/v weights; its loss
	// functions accept them so). With a flat layout, a run that lies
	// contiguous in one group is passed as that one view and
	// differentiated as one array: no concatenation of the weights in each
	// step, one gradient instead of several. Ignored otherwise.
	StackedParams [][]int

	// DependsOn picks, from what the microbatches so far accumulated
	// (every gradient, then the loss), what each microbatch after the first
	// waits for; nil, the default, picks all of it (see Step.body), which
	// bounds the step's peak memory to one microbatch's. It is there to
	// compare other orderings (docs/performance/cpu.md measures them), the
	// unbounded formulation among them.
	DependsOn func(accumulated []*mlx.Array) []*mlx.Array
}

// Step is one optimizer update as a pure function of its inputs:
//
//	(params, optimizer state, lr, x[N,B,T], y[N,B,T]) → (params', state', mean loss, grad norm)
//
// or, with StepOptions.ComputeCopies,
//
//	(params, copies, state, lr, x, y) → (params', copies', state', mean loss, grad norm)
//
// A weighted step (Layout.Inputs WeightedInputs) also takes frozen arrays
// and the update's loss weights w[N,B,T]; only the trainable params are
// differentiated and have optimizer state:
//
//	(params, [copies], frozen, state, lr, x, y, w) → (params', [copies'], state', weighted loss, grad norm)
//
// A row step (RowInputs) takes per-row inputs after the token mask w,
// the row weights first, and emits its loss's auxiliary sums last:
//
//	(params, frozen, state, lr, x, y, w, rows…[N,B]) → (params', state', weighted loss, grad norm, aux…)
//
// In place of x and y an unweighted step also takes its windows' starts
// in a token stream on the device (TokenStream, Batch.Starts): the stream,
// its view one token further, the offsets 0 … T-1 and starts[N,B]; it
// gathers each microbatch's x and y itself.
//
// The learning rate is an input array, never a captured float, and N is
// fixed, so a run with a schedule and accumulation traces exactly once.
// A State applies a Step to the arrays it owns; Run is the bare function.
type Step struct {
	opt      optim.Optimizer
	opts     StepOptions
	nParams  int
	nState   int
	nCopies  int // nParams with ComputeCopies, else 0
	nFrozen  int // frozen (not differentiated) inputs of a weighted step
	layout   Layout
	weighted bool // Inputs other than TokenInputs
	packed   bool // PackedInputs: segments as a fourth batch input
	// nRows is the number of per-row [N, B] float32 inputs after x, y
	// and w of a RowInputs step, the first the row weights; nAux the
	// scalars its loss returns beside the loss, summed like it.
	nRows, nAux int
	// nPos is the number of per-position [N, B, T] float32 inputs of a
	// RowInputs step, after its row inputs.
	nPos int
	// flat is the flat layout of an elementwise optimizer's parameters
	// and state (optim.Flat), built by layoutFor from the first
	// parameters the step sees; nil runs the optimizer per parameter.
	flat *optim.Flat
	// loss reads the flat list (params, frozen arrays, x, y and, when
	// weighted, w, then a row step's row inputs) and returns the loss and
	// a row step's auxiliary sums; vag differentiates the loss with
	// respect to units, the arrays the step passes for the parameters
	// (gradient), in order.
	loss     func(in []*mlx.Array) []*mlx.Array
	units    [][]int
	vag      *mlx.ValueAndGradFunc
	compiled *mlx.Closure
	traces   int // written on the MLX thread, read after mlx.Do returns
}

// StepResult holds a step's outputs. The caller owns them.
type StepResult struct {
	Params, State  []*mlx.Array
	Loss, GradNorm *mlx.Array
	// Aux are the auxiliary sums over the update its loss emits, in the
	// order of Layout.Aux; nil when it names none.
	Aux []*mlx.Array
}

// stepOutputs are everything one update emits, copies included.
type stepOutputs struct {
	params, copies, state []*mlx.Array
	loss, gradNorm        *mlx.Array
	aux                   []*mlx.Array
}

// all lists the outputs, for evaluating or freeing them together.
func (o stepOutputs) all() []*mlx.Array {
	out := make([]*mlx.Array, 0, len(o.params)+len(o.copies)+len(o.state)+2+len(o.aux))
	out = append(append(append(append(out, o.params...), o.copies...), o.state...), o.loss, o.gradNorm)
	return append(out, o.aux...)
}

// newStep checks the options and builds (and, with Compile, compiles)
// the step of layout l whose loss reads the flat list (trainable params,
// frozen arrays, then the microbatch's inputs) and returns the loss
// first, then l.Aux's sums.
func newStep(loss func(in []*mlx.Array) []*mlx.Array, opt optim.Optimizer, l Layout, opts StepOptions) (*Step, error) {
	nParams, nFrozen, nState := l.Trainable, l.Frozen, l.State
	weighted := l.Inputs != TokenInputs
	if opts.Accum < 1 {
		return nil, fmt.Errorf("step: accum = %d, want >= 1", opts.Accum)
	}
	if opts.GradClip < 0 || math.IsNaN(opts.GradClip) {
		return nil, fmt.Errorf("step: grad clip = %g, want >= 0 (0 disables)", opts.GradClip)
	}
	if opts.ComputeCopies && !opts.ComputeDtype.IsFloat() {
		return nil, fmt.Errorf("step: compute dtype %v for the parameter copies, want a float type", opts.ComputeDtype)
	}
	if !opts.ComputeCopies && opts.ComputeDtype != 0 {
		return nil, fmt.Errorf("step: compute dtype %v set without ComputeCopies", opts.ComputeDtype)
	}
	if nParams < 1 || nState < 0 {
		return nil, fmt.Errorf("step: step over %d parameters and %d state arrays, want >= 1 and >= 0", nParams, nState)
	}
	for _, run := range opts.StackedParams {
		for _, i := range run {
			if i < 0 || i >= nParams {
				return nil, fmt.Errorf("step: stacked parameter run %v: index %d out of range [0, %d)", run, i, nParams)
			}
		}
	}
	s := &Step{opt: opt, opts: opts, layout: l, nParams: nParams, nState: nState, nFrozen: nFrozen, weighted: weighted,
		packed: l.Inputs == PackedInputs, nAux: len(l.Aux), loss: loss}
	if l.Inputs == RowInputs {
		s.nRows, s.nPos = 1+l.RowInputs, l.PositionInputs
	}
	if opts.ComputeCopies {
		s.nCopies = nParams
	}
	if opts.Compile {
		err := mlx.Do(func() (err error) {
			if s.compiled, err = mlx.Compile(s.body); err != nil {
				return fmt.Errorf("step: compiling the step: %w", err)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return s, nil
}

// gradient returns the value-and-gradient function of the loss with
// respect to the step's units, building it on first use (inside the first
// trace, once the layout is known): with a flat layout the units are
// optim.Flat.Units of StackedParams, otherwise each parameter.
func (s *Step) gradient() (*mlx.ValueAndGradFunc, error) {
	if s.vag != nil {
		return s.vag, nil
	}
	units := make([][]int, s.nParams)
	for i := range units {
		units[i] = []int{i}
	}
	if s.flat != nil {
		units = s.flat.Units(s.opts.StackedParams)
	}
	U := len(units)
	argnums := make([]int, U)
	for i := range argnums {
		argnums[i] = i
	}
	vag, err := mlx.ValueAndGrad(func(in []*mlx.Array) ([]*mlx.Array, error) {
		full := make([]*mlx.Array, s.nParams, s.nParams+len(in)-U)
		for u, unit := range units {
			full[unit[0]] = in[u] // a stacked run's other slots stay nil
		}
		return s.loss(append(full, in[U:]...)), nil
	}, argnums...)
	if err != nil {
		return nil, fmt.Errorf("step: building value_and_grad: %w", err)
	}
	s.vag, s.units = vag, units
	return vag, nil
}

// Traces counts how often the step function's Go body ran: with Compile,
// the number of MLX traces (1 for a whole run with static shapes); without,
// the number of steps.
func (s *Step) Traces() int { return s.traces }

// Compiled reports whether the step is compiled.
func (s *Step) Compiled() bool { return s.compiled != nil }

// Weighted reports whether the step takes frozen arrays and loss weights
// (any Layout.Inputs but TokenInputs).
func (s *Step) Weighted() bool { return s.weighted }

// FlatGroups is the number of flat parameter groups the step updates
// (optim.Flat: an elementwise optimizer's parameters and state packed by
// dtype), known once the step has seen its parameters; 0 when it updates
// each parameter on its own.
func (s *Step) FlatGroups() int {
	if s.flat == nil {
		return 0
	}
	return s.flat.Groups()
}

// Differentiated is the number of arrays the step differentiates, known
// after its first trace: one per parameter, or per flat group's run with
// StackedParams' runs each one array.
func (s *Step) Differentiated() int { return len(s.units) }

// Free releases the step's MLX functions and trace cache. A nil step is
// a no-op.
func (s *Step) Free() {
	if s == nil {
		return
	}
	mlx.Do(func() error {
		s.compiled.Free()
		s.vag.Free()
		return nil
	})
}

// microbatch returns a[i] of an [N, …] array as […]: [B, T] of a batch
// array, [B] of a row input.
func microbatch(a *mlx.Array, i int) *mlx.Array {
	start, stop := make([]int, a.Ndim()), a.Shape()
	start[0], stop[0] = i, i+1
	return mlx.Squeeze(mlx.Slice(a, start, stop), 0)
}

// windowInputs is the number of batch inputs of the window form
// (TokenStream.arrays): the stream, its view one token further, the
// window offsets 0 … T-1 and the starts [N, B].
const windowInputs = 4

// windowed reports whether batch is the window form rather than x, y
// and, when weighted, w.
func (s *Step) windowed(batch []*mlx.Array) bool { return !s.weighted && len(batch) == windowInputs }

// microbatchInputs sets mb to microbatch i's inputs, targets and, when
// weighted, weights: slices of the [N, B, T] batch arrays, or, in the
// window form, two gathers from the stream at starts[i] + offsets (the
// targets' from the stream's view one token further).
func (s *Step) microbatchInputs(batch []*mlx.Array, i int, mb []*mlx.Array) {
	if !s.windowed(batch) {
		for k, a := range batch {
			mb[k] = microbatch(a, i)
		}
		return
	}
	tokens, shifted, offsets, starts := batch[0], batch[1], batch[2], batch[3]
	b := starts.Dim(1)
	row := mlx.Reshape(mlx.Slice(starts, []int{i, 0}, []int{i + 1, b}), b, 1)
	idx := mlx.Add(row, offsets) // [B, T]
	mb[0], mb[1] = mlx.Take(tokens, idx, 0), mlx.Take(shifted, idx, 0)
}

// body is the traced function: N forward/backward passes, gradient
// averaging (over the microbatches, then across StepOptions.Group's
// ranks) and clipping, and the optimizer update; with ComputeCopies the
// passes take the copies and the body also emits the new parameters cast
// to ComputeDtype, which MLX's compiler fuses into the update's kernel.
//
// Microbatch i's tokens depend (mlx.Depends) on what microbatches 0 … i-1
// accumulated: every gradient and the loss. Nothing else orders the
// passes: MLX would be free to run all N forward passes before any
// backward pass and hold all N microbatches' activations at once. Waiting
// for the whole accumulated gradient finishes microbatch i-1's backward
// pass, weight gradients included, before microbatch i's forward pass
// starts; waiting for the loss too computes it then, rather than at the
// end of the step, when its inputs (the logits' softmax statistics) would
// have stayed alive for every microbatch. The step's peak is then one
// microbatch's plus the float32 accumulators, whatever N
// (docs/performance/cpu.md measures it against fewer dependencies).
//
// With a flat layout (an elementwise optimizer, optim.Flat) the inputs
// and outputs are the layout's groups: the loss reads per-parameter views
// of them, each microbatch's gradients are concatenated into one array
// per group and summed in float32 (groupGrads), and the optimizer runs
// once per group (flatUpdate). On a GPU that is three kernels per
// parameter and update fewer: its cast, its accumulation or concatenation
// for the norm, and its optimizer update (docs/performance/gpu.md); on a
// CUDA GPU the concatenation, the cast and the accumulation of a group
// are one kernel.
func (s *Step) body(in []*mlx.Array) ([]*mlx.Array, error) {
	s.traces++
	P, C, S := s.layoutSizes()
	F := s.nFrozen
	params, frozen, state := in[:P], in[P+C:P+C+F], in[P+C+F:P+C+F+S]
	batch := in[P+C+F+S+1:] // x, y and, when weighted, w; or the window form
	lr := in[P+C+F+S]
	lossParams := params
	if C > 0 {
		lossParams = in[P : P+C]
	}
	vag, err := s.gradient()
	if err != nil {
		return nil, err
	}
	if s.flat != nil {
		lossParams = s.flat.Views(lossParams, s.units) // no copies
	}
	n := s.opts.Accum
	// acc holds the float32 gradient sums: one per parameter, or with a
	// flat layout one per group.
	var acc, auxSum []*mlx.Array
	var lossSum *mlx.Array
	U := len(lossParams)
	nb := len(batch)
	if s.windowed(batch) {
		nb = 2 // x and y, gathered
	}
	args := make([]*mlx.Array, U+F+nb)
	copy(args, lossParams)
	copy(args[U:], frozen)
	mb := args[U+F:] // this microbatch's x, y and, when weighted, w
	// On a CUDA GPU each group's gradients are copied and summed by one
	// kernel of the step's own (gradgroup.go).
	groupKernels := mlx.DefaultDevice() == mlx.GPU && mlx.CUDAAvailable()
	for i := 0; i < n; i++ {
		s.microbatchInputs(batch, i, mb)
		if i > 0 {
			deps := append(append(slices.Clip(acc), lossSum), auxSum...)
			if s.opts.DependsOn != nil {
				deps = s.opts.DependsOn(deps)
			}
			if len(deps) > 0 {
				copy(mb, mlx.Depends(mb, deps))
			}
		}
		vals, g, err := vag.Call(args...)
		if err != nil {
			return nil, err
		}
		if len(vals) != 1+s.nAux {
			return nil, fmt.Errorf("step: the loss returned %d values, want the loss and %d auxiliary sums", len(vals), s.nAux)
		}
		if i == 0 {
			lossSum, auxSum = vals[0], slices.Clone(vals[1:])
		} else {
			lossSum = mlx.Add(lossSum, vals[0])
			for j, a := range vals[1:] {
				auxSum[j] = mlx.Add(auxSum[j], a)
			}
		}
		if s.flat != nil {
			if acc, err = s.groupGrads(g, acc, groupKernels); err != nil {
				return nil, err
			}
			continue
		}
		if i == 0 {
			acc = make([]*mlx.Array, len(g))
			for j := range g {
				acc[j] = mlx.AsType(g[j], mlx.Float32)
			}
			continue
		}
		for j := range g {
			acc[j] = mlx.Add(acc[j], mlx.AsType(g[j], mlx.Float32))
		}
	}
	var newParams, newState, sums []*mlx.Array
	var norm *mlx.Array
	sums = append([]*mlx.Array{lossSum}, auxSum...) // the loss, then the auxiliary sums
	if s.flat != nil {
		newParams, newState, sums, norm, err = s.flatUpdate(params, acc, state, lr, sums)
	} else {
		newParams, newState, sums, norm, err = s.update(params, acc, state, lr, sums)
	}
	if err != nil {
		return nil, err
	}
	out := make([]*mlx.Array, 0, P+C+S+2+s.nAux)
	out = append(out, newParams...)
	for i := 0; i < C; i++ {
		out = append(out, mlx.AsType(newParams[i], s.opts.ComputeDtype))
	}
	out = append(append(out, newState...), sums[0], norm)
	return append(out, sums[1:]...), nil
}

// meanFactor is what the summed microbatch losses and gradients are
// multiplied by: 1/N for a plain step, 1 for a weighted one, whose weights
// already normalise them over the whole update.
func (s *Step) meanFactor() float64 {
	if s.weighted {
		return 1
	}
	return 1 / float64(s.opts.Accum)
}

// update averages, all-reduces and clips the per-parameter gradients and
// runs the optimizer on each parameter. sums are the loss summed over the
// microbatches and a row step's auxiliary sums, averaged and reduced like
// the gradients.
func (s *Step) update(params, grads, state []*mlx.Array, lr *mlx.Array, sums []*mlx.Array) (newParams, newState, means []*mlx.Array, norm *mlx.Array, err error) {
	// (A data-parallel step all-reduces the summed gradients and loss here,
	// before clipping; with weights normalised by the global token count,
	// Batch.WeightSum, the sum over ranks is the global mean.)
	means = sums
	if k := s.meanFactor(); k != 1 {
		means = make([]*mlx.Array, len(sums))
		for j, a := range sums {
			means[j] = mlx.MulScalar(a, k)
		}
		for j := range grads {
			grads[j] = mlx.MulScalar(grads[j], k)
		}
	}
	grads, means = reduceAcrossRanks(s.opts.Group, grads, means, !s.weighted)
	clipped, norm := optim.ClipByGlobalNorm(grads, s.opts.GradClip)
	newParams, newState, err = s.opt.Update(params, clipped, state, lr)
	return newParams, newState, means, norm, err
}
