package mlx

// Scope frees, when closed, every array created on the MLX thread while it
// was the innermost open scope, except those kept. Scopes nest. They belong
// to the MLX thread: open one inside Do (or in code that already runs there,
// such as a traced function), or use Run, which does that for you. Arrays
// that other goroutines create through single handed-over calls never join
// a scope.
type Scope struct {
	parent *Scope
	arrays []*Array
	closed bool
}

// topScope is the MLX thread's innermost open scope. Only the MLX thread
// reads or writes it.
var topScope *Scope

// NewScope opens a scope on the MLX thread. Called from any other goroutine
// it panics: the arrays that goroutine creates are made by separate calls
// handed to the MLX thread, and a scope there cannot tell them from those of
// other goroutines, so it could only free the wrong arrays or none. Use Run,
// or open the scope inside Do.
func NewScope() *Scope {
	if !onMLXThread() {
		panic("mlx: NewScope called off the MLX thread; open the scope inside mlx.Do, or use mlx.Run")
	}
	s := &Scope{parent: topScope}
	topScope = s
	return s
}

// registerInScope adds a to the innermost open scope. onThread says whether
// the call that made a ran on the MLX thread directly; arrays made for other
// goroutines are never registered.
func registerInScope(a *Array, onThread bool) {
	if onThread && topScope != nil {
		a.scope = topScope
		topScope.arrays = append(topScope.arrays, a)
	}
}

// dropScopes pops, without freeing their arrays, the scopes a Do job left
// open: the next job belongs to another goroutine whose arrays must not
// join them. The garbage collector frees the arrays they held.
func dropScopes() {
	for s := topScope; s != nil; s = s.parent {
		s.closed = true
		for _, a := range s.arrays {
			if a.scope == s {
				a.scope = nil
			}
		}
		s.arrays = nil
	}
	topScope = nil
}

// Keep moves arrays out of this scope into its parent scope (or out of any
// scope), so Close leaves them alive. Arrays not owned by s are ignored.
// Called off the MLX thread, it runs there.
func (s *Scope) Keep(arrs ...*Array) {
	if !onMLXThread() {
		_ = Do(func() error { s.Keep(arrs...); return nil })
		return
	}
	for _, a := range arrs {
		if a == nil || a.scope != s {
			continue
		}
		a.scope = s.parent
		if s.parent != nil {
			s.parent.arrays = append(s.parent.arrays, a)
		}
	}
}

// Close frees the scope's arrays that were not kept and pops the scope.
// Closing twice is a no-op. Scopes must close innermost first. Called off
// the MLX thread, it runs there.
func (s *Scope) Close() {
	if !onMLXThread() {
		_ = Do(func() error { s.Close(); return nil })
		return
	}
	if s.closed {
		return
	}
	s.closed = true
	for _, a := range s.arrays {
		if a.scope == s {
			a.Free()
		}
	}
	s.arrays = nil
	if topScope == s {
		topScope = s.parent
	}
}

// Run calls fn on the MLX thread inside a new scope and keeps the arrays fn
// returns; every other array fn created there is freed. It works from any
// goroutine (see Do).
func Run(fn func() []*Array) []*Array {
	var out []*Array
	_ = Do(func() error {
		s := NewScope()
		defer s.Close()
		out = fn()
		s.Keep(out...)
		return nil
	})
	return out
}
