package optim

import (
	"fmt"
	"slices"

	"github.com/posttrainllm/posttrainllm/mlx"
)

// StepName is the checkpoint name of the update counter, the first state
// array of every optimizer: a 0-D int32 holding the number of updates done.
const StepName = "step"

// slot is one state array kept for one parameter, named "<param>.<suffix>".
type slot struct {
	suffix string
	shape  []int
}

// layout maps an optimizer's flat state list onto its parameters: index 0
// is the step counter, then each parameter's slots in parameter order.
type layout struct {
	opt    string // optimizer name, for errors
	params []Param
	names  []string
	shapes [][]int
	first  []int // first[i]: state index of parameter i's first slot
	count  []int // count[i]: number of slots of parameter i
}

// newLayout validates params and lays out the slots that slots returns for
// each of them.
func newLayout(opt string, params []Param, slots func(Param) []slot) (*layout, error) {
	l := &layout{
		opt:    opt,
		params: make([]Param, len(params)),
		names:  []string{StepName},
		shapes: [][]int{{}},
		first:  make([]int, len(params)),
		count:  make([]int, len(params)),
	}
	seen := map[string]int{}
	for i, p := range params {
		if p.Name == "" {
			return nil, fmt.Errorf("optim: %s: param %d has an empty name", opt, i)
		}
		if p.Name == StepName {
			return nil, fmt.Errorf("optim: %s: param %d is named %q, which is reserved for the update counter", opt, i, p.Name)
		}
		if j, dup := seen[p.Name]; dup {
			return nil, fmt.Errorf("optim: %s: params %d and %d are both named %q", opt, j, i, p.Name)
		}
		seen[p.Name] = i
		for _, d := range p.Shape {
			if d <= 0 {
				return nil, fmt.Errorf("optim: %s: param %q has shape %v, want every dimension > 0", opt, p.Name, p.Shape)
			}
		}
		p.Shape = slices.Clone(p.Shape)
		l.params[i] = p
		l.first[i] = len(l.names)
		for _, s := range slots(p) {
			l.names = append(l.names, p.Name+"."+s.suffix)
			l.shapes = append(l.shapes, s.shape)
		}
		l.count[i] = len(l.names) - l.first[i]
	}
	return l, nil
}

// init returns the zero state: the step counter and float32 zeros.
func (l *layout) init() ([]*mlx.Array, error) {
	out := make([]*mlx.Array, len(l.names))
	out[0] = mlx.Zeros(nil, mlx.Int32)
	for j := 1; j < len(out); j++ {
		out[j] = mlx.Zeros(l.shapes[j], mlx.Float32)
	}
	for j, a := range out {
		if err := a.Err(); err != nil {
			mlx.Free(out...)
			return nil, fmt.Errorf("optim: %s: init %s: %w", l.opt, l.names[j], err)
		}
	}
	return out, nil
}

// paramList returns a copy of the parameters.
func (l *layout) paramList() []Param {
	out := make([]Param, len(l.params))
	for i, p := range l.params {
		p.Shape = slices.Clone(p.Shape)
		out[i] = p
	}
	return out
}

// stateNames returns a copy of the state names.
func (l *layout) stateNames() []string { return slices.Clone(l.names) }

// slots returns parameter i's state arrays.
func (l *layout) slots(state []*mlx.Array, i int) []*mlx.Array {
	return state[l.first[i] : l.first[i]+l.count[i]]
}

// check validates Update's arguments against the layout using array
// metadata only (no data is read).
func (l *layout) check(params, grads, state []*mlx.Array, lr *mlx.Array) error {
	if len(params) != len(l.params) || len(grads) != len(l.params) {
		return fmt.Errorf("optim: %s: got %d params and %d grads, want %d of each", l.opt, len(params), len(grads), len(l.params))
	}
	if len(state) != len(l.names) {
		return fmt.Errorf("optim: %s: got %d state arrays, want %d (see StateNames)", l.opt, len(state), len(l.names))
	}
	if err := lr.Err(); err != nil {
		return fmt.Errorf("optim: %s: lr: %w", l.opt, err)
	}
	if lr.Ndim() != 0 || !lr.Dtype().IsFloat() {
		return fmt.Errorf("optim: %s: lr is %s, want a 0-D floating-point array", l.opt, lr)
	}
	for i, p := range l.params {
		if err := checkArray(params[i], p.Shape, -1); err != nil {
			return fmt.Errorf("optim: %s: param %q: %w", l.opt, p.Name, err)
		}
		if !params[i].Dtype().IsFloat() {
			return fmt.Errorf("optim: %s: param %q is %s, want a floating-point dtype", l.opt, p.Name, params[i])
		}
		if err := checkArray(grads[i], p.Shape, -1); err != nil {
			return fmt.Errorf("optim: %s: grad of %q: %w", l.opt, p.Name, err)
		}
	}
	for j, name := range l.names {
		want := mlx.Float32
		if j == 0 {
			want = mlx.Int32
		}
		if err := checkArray(state[j], l.shapes[j], want); err != nil {
			return fmt.Errorf("optim: %s: state %q: %w", l.opt, name, err)
		}
	}
	return nil
}

// checkArray reports an error carried by a, or a shape (and, when dtype is
// not -1, dtype) that differs from the expected one.
func checkArray(a *mlx.Array, shape []int, dtype mlx.Dtype) error {
	if err := a.Err(); err != nil {
		return err
	}
	if !slices.Equal(a.Shape(), shape) {
		return fmt.Errorf("array is %s, want shape %v", a, shape)
	}
	if dtype != -1 && a.Dtype() != dtype {
		return fmt.Errorf("array is %s, want dtype %s", a, dtype)
	}
	return nil
}
