package step

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/optim"
)

// StepStats are what one update measured.
type StepStats struct {
	Loss     float64 // mean training loss over the update's microbatches
	GradNorm float64 // global norm of the averaged gradients, before clipping
	// Aux are the step's auxiliary sums over the update (Layout.Aux):
	// means over its weighted rows, like Loss. nil for other steps.
	Aux []float64
}

// State is what training carries from one update to the next: the
// parameters, the optimizer state and, with StepOptions.ComputeCopies, the
// parameters' compute-dtype copies, together with the Step that updates
// them. It owns these arrays: each update releases the arrays it replaces,
// and Free releases the rest.
//
//	state, err := step.InitState(update, m, seed)
//	defer state.Free()
//	for s := range steps {
//		loss, err := state.Update(schedule.LR(s), batch)
//		…
//	}
//
// Its methods run on the MLX thread (mlx.Do) and may be called from any
// goroutine, one at a time.
type State struct {
	step *Step
	// params, opt and copies are in the step's layout: per parameter, or
	// the flat groups of flat (then Params and OptState return views).
	params, opt    []*mlx.Array
	flat           *optim.Flat
	views          stateViews
	frozen         []*mlx.Array // a weighted step's frozen inputs
	copies         []*mlx.Array // nil without ComputeCopies
	loss, gradNorm *mlx.Array   // the last update's, until Stats reads them
	aux            []*mlx.Array // a row step's auxiliary sums, as loss
	stats          StepStats
	updated, read  bool // an update ran; stats holds its values
	freed          bool
	interval       lossInterval // the losses since the last IntervalLoss
	intervalAux    []float64    // the auxiliary means of the interval IntervalLoss last closed
}

// NewState returns the state of step over params and optState (in the
// order of the model's parameters and of the optimizer's StateNames). It
// takes ownership of both: do not free them yourself.
func NewState(step *Step, params, optState []*mlx.Array) (*State, error) {
	var s *State
	err := mlx.Do(func() error {
		if len(params) != step.nParams || len(optState) != step.nState {
			return fmt.Errorf("step: state of %d params and %d optimizer arrays for a step built for %d and %d",
				len(params), len(optState), step.nParams, step.nState)
		}
		if err := firstErr(params, optState); err != nil {
			return fmt.Errorf("step: state: %w", err)
		}
		if step.nFrozen > 0 {
			return fmt.Errorf("step: the step takes %d frozen arrays; use NewFrozenState", step.nFrozen)
		}
		var err error
		s, err = newState(step, params, nil, optState)
		return err
	})
	return s, err
}

// NewFrozenState is NewState for a weighted step: trainable are the
// arrays the step updates (in the order its optimizer was built for) and
// frozen the arrays it only reads (a fine-tune's base weights). It takes
// ownership of all three lists.
func NewFrozenState(step *Step, trainable, frozen, optState []*mlx.Array) (*State, error) {
	var s *State
	err := mlx.Do(func() error {
		if len(trainable) != step.nParams || len(frozen) != step.nFrozen || len(optState) != step.nState {
			return fmt.Errorf("step: state of %d trainable, %d frozen and %d optimizer arrays for a step built for %d, %d and %d",
				len(trainable), len(frozen), len(optState), step.nParams, step.nFrozen, step.nState)
		}
		if err := firstErr(trainable, frozen, optState); err != nil {
			return fmt.Errorf("step: state: %w", err)
		}
		var err error
		s, err = newState(step, trainable, frozen, optState)
		return err
	})
	return s, err
}

// newState builds a checked state, casting the compute-dtype copies.
// With a flat layout (optim.Flat) it packs the parameters and optimizer
// state into their groups and releases the per-parameter arrays.
func newState(step *Step, params, frozen, optState []*mlx.Array) (*State, error) {
	flat, err := step.layoutFor(params)
	if err != nil {
		return nil, err
	}
	s := &State{step: step, params: params, frozen: frozen, opt: optState, flat: flat}
	if flat != nil {
		s.params, s.opt = flat.Pack(params), flat.PackState(optState)
		mlx.Free(params...)
		mlx.Free(optState[1:]...) // the counter is kept as it is
	}
	if step.nCopies > 0 {
		s.copies = make([]*mlx.Array, len(s.params))
		for i, p := range s.params {
			s.copies[i] = mlx.AsType(p, step.opts.ComputeDtype)
		}
	}
	return s, nil
}

// firstErr returns the first error an array of lists carries.
func firstErr(lists ...[]*mlx.Array) error {
	for _, l := range lists {
		for _, a := range l {
			if err := a.Err(); err != nil {
				return err
			}
		}
	}
	return nil
}

// InitState returns a fresh state for step: m's parameters initialised
// with seed (model.Transformer.Init) and the initial state of the optimizer
// step was built with.
func InitState(step *Step, m *model.Transformer, seed uint64) (*State, error) {
	var s *State
	err := mlx.Do(func() error {
		params, err := m.Init(seed)
		if err != nil {
			return err
		}
		opt, err := step.opt.Init()
		if err != nil {
			mlx.Free(params...)
			return fmt.Errorf("step: optimizer state: %w", err)
		}
		if s, err = NewState(step, params, opt); err != nil {
			mlx.Free(params...)
			mlx.Free(opt...)
		}
		return err
	})
	return s, err
}

// Update applies one optimizer update with learning rate lr to batch b
// and returns its mean loss, once computed; the rest of the update (the
// optimizer's new state) may still be computing, and the next update
// builds on it. The arrays it replaces are released. A loop that reads the
// loss only now and then uses UpdateAsync and Stats instead, so the device
// computes while the host prepares the next batch.
func (s *State) Update(lr float64, b Batch) (float64, error) {
	var loss float64
	err := mlx.Do(func() error {
		if err := s.apply(lr, b); err != nil {
			return err
		}
		if err := mlx.AsyncEval(append(s.arrays(), s.interval.arrays()...)...); err != nil {
			return fmt.Errorf("step: update: %w", err)
		}
		st, err := s.readStats()
		loss = st.Loss
		return err
	})
	return loss, err
}

// UpdateAsync applies one optimizer update like Update but returns once
// the update is scheduled (mlx.AsyncEval), without waiting for it: Stats
// waits for and reads its loss and gradient norm, and the next update
// builds on its results directly. Eval waits for the whole update.
//
// Before it returns, it waits for the previous update's gradient norm,
// the end of that update's backward pass, so the host runs at most one
// update ahead of the device. A device allocates an update's buffers
// when the host schedules it and holds them until it has run: a host
// further ahead would hold several updates' activations at once (on the
// H200, a loop reading the loss every 20 updates peaked at up to 2.2×
// one update's memory).
func (s *State) UpdateAsync(lr float64, b Batch) error {
	return mlx.Do(func() error {
		var prev *mlx.Array // nil when Stats has read it: that update is done
		if s.updated && !s.read {
			prev, s.gradNorm = s.gradNorm, nil
		}
		if err := s.apply(lr, b); err != nil {
			if prev != nil { // nothing changed: the state keeps it
				s.gradNorm = prev
			}
			return err
		}
		defer prev.Free()
		if err := mlx.AsyncEval(append(s.arrays(), s.interval.arrays()...)...); err != nil {
			return fmt.Errorf("step: update: %w", err)
		}
		if prev != nil {
			if err := mlx.Eval(prev); err != nil {
				return fmt.Errorf("step: update: %w", err)
			}
		}
		return nil
	})
}

// Apply records one optimizer update without evaluating it: the state
// then holds the update's lazy results, which GraphOps can count, until
// Eval (or Stats, or the next update) computes them. Update and
// UpdateAsync are Apply followed by evaluation.
func (s *State) Apply(lr float64, b Batch) error {
	return mlx.Do(func() error { return s.apply(lr, b) })
}

// apply runs the step on the state's arrays and swaps in its results.
func (s *State) apply(lr float64, b Batch) error {
	if s.freed {
		return errors.New("step: update of a freed state")
	}
	if math.IsNaN(lr) || lr < 0 || lr > math.MaxFloat32 {
		return fmt.Errorf("step: lr = %g, want a finite value >= 0 (float32: at most %.3g)", lr, math.MaxFloat32)
	}
	if err := b.Check(s.step.opts.Accum); err != nil {
		return err
	}
	var w []float32
	var total float64
	if s.step.weighted && b.Stream != nil {
		return errors.New("step: a weighted step takes token batches (Batch.X, Y, W), not window starts")
	}
	rows, total, err := s.rowInputs(b)
	if err != nil {
		return err
	}
	if s.step.nRows > 0 {
		if w, _, err = normalize(b.W, 1, "token mask value"); err != nil {
			return err
		}
	} else if s.step.weighted {
		if b.W == nil {
			return errors.New("step: a weighted step's batch needs loss weights (Batch.W)")
		}
		var err error
		if w, total, err = b.NormalizedWeights(); err != nil {
			return err
		}
	}
	var batch, made []*mlx.Array // made: the arrays made here, freed here
	if b.Stream != nil {
		batch = b.Stream.arrays(b.Starts, b.N, b.B)
		made = batch[len(batch)-1:]
	} else {
		batch = []*mlx.Array{mlx.FromSlice(b.X, b.N, b.B, b.T), mlx.FromSlice(b.Y, b.N, b.B, b.T)}
		if w != nil {
			batch = append(batch, mlx.FromSlice(w, b.N, b.B, b.T))
		}
		if b.Seg != nil {
			batch = append(batch, mlx.FromSlice(b.Seg, b.N, b.B, b.T))
		}
		for _, r := range rows {
			batch = append(batch, mlx.FromSlice(r, b.N, b.B))
		}
		for _, p := range b.PositionInputs {
			batch = append(batch, mlx.FromSlice(p, b.N, b.B, b.T))
		}
		made = batch
	}
	lrArr := mlx.Scalar(lr, mlx.Float32)
	out, err := s.step.applyLayout(s.params, s.copies, s.frozen, s.opt, lrArr, batch...)
	mlx.Free(made...)
	mlx.Free(lrArr)
	if err != nil {
		return err
	}
	s.release()
	s.params, s.copies, s.opt, s.loss, s.gradNorm, s.aux = out.params, out.copies, out.state, out.loss, out.gradNorm, out.aux
	s.updated, s.read = true, false
	s.interval.add(s.loss, s.aux, updateTokens(b, s.step.weighted, total))
	return nil
}

// arrays lists every array the state holds: the last update's loss and
// gradient norm only until Stats has read them.
func (s *State) arrays() []*mlx.Array {
	all := stepOutputs{params: s.params, copies: s.copies, state: s.opt, loss: s.loss, gradNorm: s.gradNorm, aux: s.aux}.all()
	return slices.DeleteFunc(all, func(a *mlx.Array) bool { return a == nil })
}

// release frees every array the state holds.
func (s *State) release() {
	mlx.Free(s.arrays()...)
	s.loss, s.gradNorm, s.aux = nil, nil, nil
	s.views.free()
}

// stateViews are the per-parameter views of a flat state's groups that
// Params and OptState hand out, made on first use after each update.
type stateViews struct {
	params, opt []*mlx.Array
}

// free releases the views. opt[0] is the state's own update counter
// (optim.Flat.UnpackState), which the state releases itself.
func (v *stateViews) free() {
	mlx.Free(v.params...)
	if len(v.opt) > 0 {
		mlx.Free(v.opt[1:]...)
	}
	*v = stateViews{}
}

// Eval computes the state's pending update, if any, and waits for it.
func (s *State) Eval() error {
	return mlx.Do(func() error {
		if s.freed {
			return errors.New("step: evaluation of a freed state")
		}
		return mlx.Eval(append(s.arrays(), s.interval.arrays()...)...)
	})
}

// Stats waits for the last update and returns its loss and gradient norm.
func (s *State) Stats() (StepStats, error) {
	var st StepStats
	err := mlx.Do(func() error {
		var err error
		st, err = s.readStats()
		return err
	})
	return st, err
}

// readStats reads the last update's loss and gradient norm once and keeps
// the values, releasing their arrays.
func (s *State) readStats() (StepStats, error) {
	switch {
	case s.freed:
		return StepStats{}, errors.New("step: stats of a freed state")
	case !s.updated:
		return StepStats{}, errors.New("step: stats before the first update")
	case s.read:
		return s.stats, nil
	}
	loss, err := s.loss.Item()
	if err != nil {
		return StepStats{}, fmt.Errorf("step: update: %w", err)
	}
	norm, err := s.gradNorm.Item()
	if err != nil {
		return StepStats{}, fmt.Errorf("step: update: %w", err)
	}
	var aux []float64
	for _, a := range s.aux {
		v, err := a.Item()
		if err != nil {
			return StepStats{}, fmt.Errorf("step: update: %w", err)
		}
		aux = append(aux, v)
	}
	mlx.Free(s.loss, s.gradNorm)
	mlx.Free(s.aux...)
	s.loss, s.gradNorm, s.aux = nil, nil, nil
	s.stats, s.read = StepStats{Loss: loss, GradNorm: norm, Aux: aux}, true
	return s.stats, nil
}

// GraphOps counts, by primitive name, the operations behind the state's
// arrays that are not computed yet: after Apply, what evaluating that
// update runs (see mlx.GraphOps).
func (s *State) GraphOps() (map[string]int, error) {
	var ops map[string]int
	err := mlx.Do(func() error {
		if s.freed {
			return errors.New("step: graph of a freed state")
		}
		var err error
		ops, err = mlx.GraphOps(s.arrays()...)
		return err
	})
	return ops, err
}

// Params returns the current parameters in the model's order. The state
// owns them: they stay valid until the next update or Free. With a flat
// layout they are views of the state's flat arrays (no copies).
func (s *State) Params() []*mlx.Array {
	if s.flat == nil || s.freed {
		return s.params
	}
	if s.views.params == nil {
		mlx.Do(func() error { s.views.params = s.flat.Unpack(s.params); return nil })
	}
	return s.views.params
}

// Copies returns the compute-dtype copies of the parameters the state
// carries with StepOptions.ComputeCopies (per flat group with a flat
// layout), nil without. The state owns them, as Params.
func (s *State) Copies() []*mlx.Array { return s.copies }

// Frozen returns the frozen arrays of a weighted step's state (nil
// otherwise). The state owns them, as Params.
func (s *State) Frozen() []*mlx.Array { return s.frozen }

// OptState returns the current optimizer state in the order of the
// optimizer's StateNames. The state owns it, as Params.
func (s *State) OptState() []*mlx.Array {
	if s.flat == nil || s.freed {
		return s.opt
	}
	if s.views.opt == nil {
		mlx.Do(func() error { s.views.opt = s.flat.UnpackState(s.opt); return nil })
	}
	return s.views.opt
}

// Free releases every array the state holds; the state cannot be used
// afterwards. Freeing twice, or a nil state, is a no-op. The Step is not
// freed.
func (s *State) Free() {
	if s == nil {
		return
	}
	mlx.Do(func() error {
		if !s.freed {
			s.release()
			s.interval.free()
			mlx.Free(s.frozen...)
			s.params, s.copies, s.frozen, s.opt = nil, nil, nil, nil
			s.freed = true
		}
		return nil
	})
}

// RefreshOptState replaces the optimizer state with what refresh returns
// for the current parameters and state, on the MLX thread: what an
// optimizer whose state is refreshed beside the compiled step needs
// (GaLore's projections, Sophia's Hessian estimate, from a gradient or an
// estimate of their own). refresh frees the arrays of opt that its result
// no longer holds; on an error the state keeps opt.
func (s *State) RefreshOptState(refresh func(params, opt []*mlx.Array) ([]*mlx.Array, error)) error {
	return mlx.Do(func() error {
		if s.freed {
			return errors.New("step: refresh of a freed state's optimizer state")
		}
		fresh, err := refresh(s.params, s.opt)
		if err != nil {
			return err
		}
		if len(fresh) != len(s.opt) {
			return fmt.Errorf("step: refreshed optimizer state of %d arrays, want %d", len(fresh), len(s.opt))
		}
		s.opt = fresh
		return nil
	})
}
