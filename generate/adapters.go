package generate

import (
	"fmt"
	"slices"
	"strings"

	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/peft"
)

// Adapter is a LoRA or DoRA adapter an Engine applies to the rows whose
// Sequence names it (Sequence.Adapter), beside rows of the base and of
// other adapters in the same decode step.
type Adapter struct {
	// Spec lays the adapter out over the engine's model: peft.New with
	// the model's Specs. An adapter trained over a quantized base
	// (Spec.Quant) is refused: the engine's base is float, and such an
	// adapter computes its function over the quantized weights.
	Spec *peft.Adapter
	// Params are the adapter's arrays in Spec.Specs order, as training
	// holds them (lora_A, lora_B and, for DoRA, magnitude per target).
	Params []*mlx.Array
}

// adapterOp is a SetAdapter (a set) or RemoveAdapter (a nil) waiting for
// the loop, which answers on done.
type adapterOp struct {
	name string
	a    *Adapter
	done chan error
}

// SetAdapter registers adapter a under name, or replaces the adapter of
// that name, from the engine's next step on, and returns once the engine
// has taken it. Sequences name it in Sequence.Adapter; rows of different
// adapters and of the base decode in the same step.
//
// The engine stacks the adapters' factors into tables of its own (a copy
// of the adapters, never of the base weights; peft.Rows), so setting an
// adapter costs a copy of every adapter registered and, for DoRA, the
// norms of its merged weights; no trace is added while the ranks and
// targets stay those of before. It keeps a's arrays (without copying)
// to build the tables again when SetParams changes a DoRA adapter's
// base weights: they must stay alive until the name is set again or
// removed, as SetParams' parameters must. A trainer that updates its
// adapter between rollouts calls SetAdapter with the new arrays after
// each optimizer step and may free the old ones once it returns; rows
// running at the time continue with the new adapter.
//
// The adapter must adapt the engine's model (the same parameter layout)
// over a float base; name must not be empty (the empty name is the base).
func (e *Engine) SetAdapter(name string, a Adapter) error {
	if name == "" {
		return fmt.Errorf("generate: engine: an adapter needs a name; the empty name is the base model")
	}
	if a.Spec == nil {
		return fmt.Errorf("generate: engine: adapter %q has no Spec; want the peft.Adapter that lays out its arrays", name)
	}
	return e.adapterOp(adapterOp{name: name, a: &a})
}

// RemoveAdapter unregisters the adapter of that name and returns once the
// engine no longer reads it: requests that name it, running or waiting,
// end with an error, and Submit refuses new ones.
func (e *Engine) RemoveAdapter(name string) error {
	e.mu.Lock()
	if !e.adapterNames[name] {
		names := e.adapterList()
		e.mu.Unlock()
		return fmt.Errorf("generate: engine: no adapter %q to remove; the engine has %s", name, describeNames(names))
	}
	delete(e.adapterNames, name)
	e.mu.Unlock()
	return e.adapterOp(adapterOp{name: name})
}

// Adapters returns the names of the adapters registered, sorted.
func (e *Engine) Adapters() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.adapterList()
}

// adapterList is Adapters with e.mu held.
func (e *Engine) adapterList() []string {
	names := make([]string, 0, len(e.adapterNames))
	for n := range e.adapterNames {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// describeNames lists adapter names for an error message.
func describeNames(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// adapterOp hands op to the loop and waits for its answer.
func (e *Engine) adapterOp(op adapterOp) error {
	op.done = make(chan error, 1)
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return ErrEngineClosed
	}
	e.adapterOps = append(e.adapterOps, op)
	e.signal()
	e.mu.Unlock()
	return mlx.Await(op.done)
}

// checkAdapter validates a against the engine's model. Call on the MLX
// thread.
func (e *Engine) checkAdapter(name string, a *Adapter) error {
	s := a.Spec
	if s.Quant != nil {
		return fmt.Errorf("generate: engine: adapter %q was trained over a quantized base (%s); the engine applies adapters over its float base only: fuse it (posttrainllm fuse) and serve the result", name, s.Quant)
	}
	specs := e.net.Specs
	if len(s.Base) != len(specs) {
		return fmt.Errorf("generate: engine: adapter %q adapts a model of %d parameters, the engine's has %d", name, len(s.Base), len(specs))
	}
	for i, p := range s.Base {
		if p.Name != specs[i].Name || !slices.Equal(p.Shape, specs[i].Shape) {
			return fmt.Errorf("generate: engine: adapter %q adapts %s %v, the engine's model has %s %v", name, p.Name, p.Shape, specs[i].Name, specs[i].Shape)
		}
	}
	if len(a.Params) != len(s.Specs) {
		return fmt.Errorf("generate: engine: adapter %q: %d arrays, its layout has %d", name, len(a.Params), len(s.Specs))
	}
	for i, p := range a.Params {
		if p == nil {
			return fmt.Errorf("generate: engine: adapter %q: array %s is nil", name, s.Specs[i].Name)
		}
		if !slices.Equal(p.Shape(), s.Specs[i].Shape) {
			return fmt.Errorf("generate: engine: adapter %q: %s has shape %v, want %v", name, s.Specs[i].Name, p.Shape(), s.Specs[i].Shape)
		}
	}
	return nil
}

// adapterBank is the loop's adapters: each by name, and their factors
// stacked for the rows (nil without adapters).
type adapterBank struct {
	byName map[string]*Adapter
	order  []string       // the adapters in rows' order
	index  map[string]int // name -> position in order
	rows   *peft.Rows
}

// lookup returns the position of adapter name in the stacked rows (−1 for
// the base, "") and whether it is registered.
func (k *adapterBank) lookup(name string) (int, bool) {
	if name == "" {
		return -1, true
	}
	if k == nil {
		return 0, false
	}
	n, ok := k.index[name]
	return n, ok
}

// applyAdapter carries out op on the loop's adapters with base params,
// stacking them again. It returns the error to answer op with. Call from
// the loop.
func (b *batch) applyAdapter(op adapterOp, params []*mlx.Array) error {
	e := b.e
	next := map[string]*Adapter{}
	if b.adapters != nil {
		for n, a := range b.adapters.byName {
			next[n] = a
		}
	}
	if op.a != nil {
		if err := mlx.Do(func() error { return e.checkAdapter(op.name, op.a) }); err != nil {
			return err
		}
		next[op.name] = op.a
	} else {
		delete(next, op.name)
		err := fmt.Errorf("generate: adapter %q was removed from the engine", op.name)
		for _, r := range b.rows {
			if r != nil && r.job.seq.Adapter == op.name {
				b.end(r, "", err)
			}
		}
		b.waiting = slices.DeleteFunc(b.waiting, func(j *job) bool {
			if j.seq.Adapter == op.name {
				b.fail([]*job{j}, err)
				return true
			}
			return false
		})
	}
	bank, err := newAdapterBank(next, params)
	if err != nil {
		return err
	}
	b.swapAdapters(bank)
	// The names Submit accepts follow the ops in the loop's order (a
	// removal answered after a set of the same name leaves it unset).
	e.mu.Lock()
	if op.a != nil {
		e.adapterNames[op.name] = true
	} else {
		delete(e.adapterNames, op.name)
	}
	e.mu.Unlock()
	return nil
}

// rebuildAdapters stacks the adapters again over new base params, where
// DoRA's magnitudes depend on them. Call from the loop.
func (b *batch) rebuildAdapters(params []*mlx.Array) error {
	if b.adapters == nil || !b.adapters.rows.DoRA() {
		return nil
	}
	bank, err := newAdapterBank(b.adapters.byName, params)
	if err != nil {
		return err
	}
	b.swapAdapters(bank)
	return nil
}

// swapAdapters makes bank the loop's adapters, freeing the old tables and
// the compiled steps of a layout no longer used. A step in flight still
// holds the arrays it was given.
func (b *batch) swapAdapters(bank *adapterBank) {
	old := b.adapters
	b.adapters = bank
	mlx.Do(func() error {
		if old != nil {
			old.rows.Free()
		}
		layout := ""
		if bank != nil {
			layout = bank.rows.Layout()
		}
		for l, steps := range b.adapted {
			if l == layout {
				continue
			}
			if b.inFlight != nil {
				if err := b.collect(); err != nil {
					b.failAll(fmt.Errorf("generate: engine: %w", err))
				}
			}
			for _, c := range steps {
				if c != nil {
					c.Free()
				}
			}
			delete(b.adapted, l)
		}
		return nil
	})
}

// newAdapterBank stacks adapters over params; nil for none.
func newAdapterBank(adapters map[string]*Adapter, params []*mlx.Array) (*adapterBank, error) {
	if len(adapters) == 0 {
		return nil, nil
	}
	k := &adapterBank{byName: adapters, index: map[string]int{}}
	for n := range adapters {
		k.order = append(k.order, n)
	}
	slices.Sort(k.order)
	specs := make([]*peft.Adapter, len(k.order))
	arrays := make([][]*mlx.Array, len(k.order))
	for i, n := range k.order {
		k.index[n] = i
		specs[i], arrays[i] = adapters[n].Spec, adapters[n].Params
	}
	rows, err := peft.NewRows(params, specs, arrays)
	if err != nil {
		return nil, fmt.Errorf("generate: engine: %w", err)
	}
	k.rows = rows
	return k, nil
}
