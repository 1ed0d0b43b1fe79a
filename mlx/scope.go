package mlx

import (
	"sync"
	"sync/atomic"
)

// Scope frees, when closed, every array created on its OS thread while it
// was the innermost open scope, except those kept. Scopes nest; they are
// per OS thread because MLX's own state is, so open and close a scope on one
// locked goroutine (runtime.LockOSThread).
type Scope struct {
	tid    int
	parent *Scope
	arrays []*Array
	closed bool
}

// scopes maps an OS thread id to its innermost open scope, mirroring MLX's
// thread-local state. open counts open scopes so that, with none open,
// creating an array costs no lookup.
var scopes = struct {
	sync.Mutex
	top  map[int]*Scope
	open atomic.Int32
}{top: map[int]*Scope{}}

// NewScope opens a scope on the calling OS thread.
func NewScope() *Scope {
	tid := osThreadID()
	scopes.Lock()
	defer scopes.Unlock()
	s := &Scope{tid: tid, parent: scopes.top[tid]}
	scopes.top[tid] = s
	scopes.open.Add(1)
	return s
}

func registerInScope(a *Array) {
	if scopes.open.Load() == 0 {
		return
	}
	tid := osThreadID()
	scopes.Lock()
	s := scopes.top[tid]
	scopes.Unlock()
	if s != nil {
		a.scope = s
		s.arrays = append(s.arrays, a)
	}
}

// Keep moves arrays out of this scope into its parent scope (or out of any
// scope), so Close leaves them alive. Arrays not owned by s are ignored.
func (s *Scope) Keep(arrs ...*Array) {
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
// Closing twice is a no-op. Scopes must close innermost first.
func (s *Scope) Close() {
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
	scopes.Lock()
	if scopes.top[s.tid] == s {
		if s.parent != nil {
			scopes.top[s.tid] = s.parent
		} else {
			delete(scopes.top, s.tid)
		}
	}
	scopes.Unlock()
	scopes.open.Add(-1)
}

// Run calls fn inside a new scope and keeps the arrays fn returns; every
// other array fn created on this thread is freed.
func Run(fn func() []*Array) []*Array {
	s := NewScope()
	defer s.Close()
	out := fn()
	s.Keep(out...)
	return out
}
