package mlx

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestDoRunsOnTheMLXThread(t *testing.T) {
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for i := 0; i < 32; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- Do(func() error {
				if !onMLXThread() {
					return errors.New("Do ran fn off the MLX thread")
				}
				// A nested Do runs directly instead of waiting for itself.
				return Do(func() error {
					if !onMLXThread() {
						return errors.New("nested Do ran fn off the MLX thread")
					}
					return nil
				})
			})
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if onMLXThread() {
		t.Fatal("the test goroutine claims to be on the MLX thread")
	}
}

func TestDoReturnsErrorsAndRaisesPanics(t *testing.T) {
	want := errors.New("from fn")
	if err := Do(func() error { return want }); err != want {
		t.Fatalf("Do returned %v, want %v", err, want)
	}
	func() {
		defer func() {
			r := recover()
			if r == nil || !strings.Contains(r.(string), "boom") {
				t.Fatalf("recovered %v, want the panic carrying \"boom\"", r)
			}
		}()
		_ = Do(func() error { panic("boom") })
		t.Fatal("Do returned after fn panicked")
	}()
	// The thread survives a panicking job.
	if err := Do(func() error { return nil }); err != nil {
		t.Fatal(err)
	}
}

// TestDoPassesGoexitOn checks that runtime.Goexit in fn (what t.Fatal
// calls) ends the calling goroutine, not the MLX thread: a function
// compiled before is still cached afterwards, which it would not be on a
// new thread, and panics are still recovered.
func TestDoPassesGoexitOn(t *testing.T) {
	var traces atomic.Int32
	c, err := Compile(countingAffine(&traces))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Free()
	callOnce := func() {
		t.Helper()
		out, err := c.Call(FromSlice([]float32{1}))
		if err != nil {
			t.Fatal(err)
		}
		if v, err := out[0].Item(); err != nil || v != 3 {
			t.Fatalf("compiled 2x+1 of 1 = %v, %v", v, err)
		}
	}
	callOnce()
	for range 2 { // the second Goexit happens on a thread already serving from a deferred call
		returned := make(chan bool, 1)
		go func() {
			finished := false
			defer func() { returned <- finished }()
			_ = Do(func() error { runtime.Goexit(); return nil })
			finished = true
		}()
		if <-returned {
			t.Fatal("Do returned after fn called runtime.Goexit")
		}
		func() {
			defer func() {
				if r := recover(); r == nil {
					t.Fatal("a panic after Goexit was not raised in the caller")
				}
			}()
			_ = Do(func() error { panic("after goexit") })
		}()
		callOnce()
	}
	if n := traces.Load(); n != 1 {
		t.Fatalf("the compiled function traced %d times around Goexits on the MLX thread, want 1", n)
	}
}

// churn keeps the scheduler busy, so goroutines move between OS threads:
// goroutines that yield constantly and goroutines that allocate (which
// also brings garbage collections, and with them cleanups). stop ends them.
func churn() (stop func()) {
	var wg sync.WaitGroup
	var done atomic.Bool
	for i := range 8 * runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var sink [][]byte
			for !done.Load() {
				if i%2 == 0 {
					runtime.Gosched()
					continue
				}
				sink = append(sink, make([]byte, 4096))
				if len(sink) == 256 {
					sink = nil
				}
			}
		}()
	}
	return func() { done.Store(true); wg.Wait() }
}

// wantFloats reads a and compares it with want exactly.
func wantFloats(what string, a *Array, want ...float32) error {
	got, err := a.Float32s()
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if !slices.Equal(got, want) {
		return fmt.Errorf("%s = %v, want %v", what, got, want)
	}
	return nil
}

// exercise runs one of everything (ops, Eval, reads, safetensors, a
// compiled function, value-and-grad, random numbers) from the calling
// goroutine with inputs that depend on g, and checks the values.
func exercise(g int, dir string, compiled *Closure, vg *ValueAndGradFunc, wantNormal []float32) error {
	var made []*Array
	defer func() { Free(made...) }()
	keep := func(a ...*Array) { made = append(made, a...) }

	v := float32(g)
	x := FromSlice([]float32{v, v + 1, v + 2})
	y := AddScalar(MulScalar(x, 2), 1)
	s := Sum(y)
	keep(x, y, s)
	if err := Eval(y, s); err != nil {
		return err
	}
	if err := wantFloats("2x+1", y, 2*v+1, 2*v+3, 2*v+5); err != nil {
		return err
	}
	if got, err := s.Item(); err != nil || got != float64(6*v+9) {
		return fmt.Errorf("sum(2x+1) = %v, %v; want %v", got, err, 6*v+9)
	}
	if sh := y.Shape(); !slices.Equal(sh, []int{3}) || y.Dtype() != Float32 {
		return fmt.Errorf("2x+1 is %s, want float32[3]", y)
	}
	parts := Split(x, 3, 0)
	keep(parts...)
	if err := wantFloats("third part", parts[2], v+2); err != nil {
		return err
	}

	path := filepath.Join(dir, fmt.Sprintf("g%d.safetensors", g))
	if err := SaveSafetensors(path, map[string]*Array{"x": x}, map[string]string{"g": strconv.Itoa(g)}); err != nil {
		return err
	}
	loaded, meta, err := LoadSafetensors(path)
	if err != nil {
		return err
	}
	for _, a := range loaded {
		keep(a)
	}
	if meta["g"] != strconv.Itoa(g) {
		return fmt.Errorf("metadata %v, want g=%d", meta, g)
	}
	if err := wantFloats("loaded x", loaded["x"], v, v+1, v+2); err != nil {
		return err
	}

	out, err := compiled.Call(x)
	if err != nil {
		return err
	}
	keep(out...)
	if err := wantFloats("compiled 2x+1", out[0], 2*v+1, 2*v+3, 2*v+5); err != nil {
		return err
	}

	ones := Ones([]int{3}, Float32)
	keep(ones)
	vals, grads, err := vg.Call(x, ones)
	if err != nil {
		return err
	}
	keep(vals...)
	keep(grads...)
	sq := v*v + (v+1)*(v+1) + (v+2)*(v+2)
	if err := wantFloats("loss", vals[0], sq); err != nil {
		return err
	}
	if err := wantFloats("gradient", grads[0], 2*v, 2*v+2, 2*v+4); err != nil {
		return err
	}

	key := RandomKey(7)
	r := RandomNormal([]int{len(wantNormal)}, Float32, 0, 1, key)
	keep(key, r)
	return wantFloats("random normal", r, wantNormal...)
}

// TestFunctionsFromManyGoroutines calls every kind of function from 64
// fresh goroutines, none locked to a thread, while other goroutines keep
// the scheduler busy.
func TestFunctionsFromManyGoroutines(t *testing.T) {
	stop := churn()
	defer stop()
	var traces atomic.Int32
	compiled, err := Compile(countingAffine(&traces))
	if err != nil {
		t.Fatal(err)
	}
	defer compiled.Free()
	vg, err := ValueAndGrad(func(in []*Array) ([]*Array, error) {
		return []*Array{Sum(Square(Multiply(in[0], in[1])))}, nil
	}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer vg.Free()
	var wantNormal []float32
	if err := Do(func() (err error) {
		key := RandomKey(7)
		r := RandomNormal([]int{8}, Float32, 0, 1, key)
		defer Free(key, r)
		wantNormal, err = r.Float32s()
		return err
	}); err != nil {
		t.Fatal(err)
	}

	before := Handoffs()
	const n = 64
	dir := t.TempDir()
	var wg sync.WaitGroup
	for g := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range g % 8 {
				runtime.Gosched()
			}
			if err := exercise(g, dir, compiled, vg, wantNormal); err != nil {
				t.Errorf("goroutine %d: %v", g, err)
			}
		}()
	}
	wg.Wait()
	if n := traces.Load(); n != 1 {
		t.Errorf("the compiled function traced %d times for one input shape, want 1", n)
	}
	// Each goroutine makes dozens of calls, every one handed over.
	if got := Handoffs() - before; got < 20*n {
		t.Errorf("%d goroutines handed over %d calls, want at least %d", n, got, 20*n)
	}
}

// TestCompiledFunctionTracesOnce calls one compiled function from many
// goroutines, half of them locked to threads of their own, after they have
// been moved around among threads: MLX keeps one compile cache per thread,
// and every call must find the trace of the first.
func TestCompiledFunctionTracesOnce(t *testing.T) {
	stop := churn()
	defer stop()
	var traces atomic.Int32
	c, err := Compile(countingAffine(&traces))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Free()
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				runtime.Gosched()
			}
			if g%2 == 1 {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
			}
			for i := range 10 {
				runtime.Gosched()
				v := float32(100*g + i)
				x := FromSlice([]float32{v})
				out, err := c.Call(x)
				if err == nil {
					err = wantFloats("compiled 2x+1", out[0], 2*v+1)
					Free(out...)
				}
				x.Free()
				if err != nil {
					t.Errorf("goroutine %d, call %d: %v", g, i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if n := traces.Load(); n != 1 {
		t.Fatalf("320 calls from 32 goroutines amid churn traced %d times, want 1", n)
	}
}

// TestLazyArrayCrossesGoroutines builds an unevaluated array on one
// goroutine and evaluates it on another, each locked to a thread of its own;
// then the same for an array built inside Do. MLX keeps streams per thread,
// so before all work ran on one thread this failed with "There is no
// Stream(cpu, 1) in current thread".
func TestLazyArrayCrossesGoroutines(t *testing.T) {
	built := make(chan *Array)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		built <- AddScalar(FromSlice([]float32{1, 2}), 1)
	}()
	lazy := <-built
	defer lazy.Free()
	ops, err := GraphOps(lazy)
	if err != nil || ops["Add"] != 1 {
		t.Fatalf("graph behind the array: %v, %v; want one unevaluated Add", ops, err)
	}
	errc := make(chan error)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		errc <- wantFloats("x+1 built elsewhere", lazy, 2, 3)
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}

	var inside *Array
	if err := Do(func() error { inside = MulScalar(FromSlice([]float32{1, 2}), 3); return nil }); err != nil {
		t.Fatal(err)
	}
	defer inside.Free()
	if err := wantFloats("3x built inside Do", inside, 3, 6); err != nil {
		t.Fatal(err)
	}
}

// TestErrorsFromOtherGoroutines checks that a failing call handed over
// reports what the same call reports on the MLX thread: the op, its operand
// shapes and MLX's message, read on the thread that failed.
func TestErrorsFromOtherGoroutines(t *testing.T) {
	a, b := Ones([]int{2, 3}, Float32), Ones([]int{4, 5}, Float32)
	defer Free(a, b)
	var onThread error
	_ = Do(func() error { onThread = Matmul(a, b).Err(); return nil })
	offThread := Matmul(a, b).Err()
	if onThread == nil || offThread == nil {
		t.Fatalf("matmul of [2,3] and [4,5]: errors %v on the MLX thread and %v off it", onThread, offThread)
	}
	if onThread.Error() != offThread.Error() {
		t.Fatalf("off the MLX thread the error is\n%v\nbut on it\n%v", offThread, onThread)
	}
	if msg := offThread.Error(); !strings.HasPrefix(msg, "mlx: matmul(float32[2,3], float32[4,5]): ") || strings.Contains(msg, "MLX thread") {
		t.Fatalf("error %q: want the op, its operands and MLX's message", msg)
	}
}

// TestHandoffsOnlyOffTheMLXThread checks where calls run: on the MLX thread
// every call runs directly; from another goroutine each bridge call is
// handed over once.
func TestHandoffsOnlyOffTheMLXThread(t *testing.T) {
	before := Handoffs()
	if err := Do(func() error {
		x := Ones([]int{4}, Float32)
		y := Add(x, x)
		defer Free(x, y)
		return wantFloats("x+x", y, 2, 2, 2, 2)
	}); err != nil {
		t.Fatal(err)
	}
	if n := Handoffs() - before; n != 0 {
		t.Fatalf("calls inside Do were handed over %d times, want 0", n)
	}
	x := Ones([]int{4}, Float32) // one bridge call
	if n := Handoffs() - before; n != 1 {
		t.Fatalf("Ones from another goroutine was handed over %d times, want 1", n)
	}
	y := Add(x, x) // one more
	Free(x, y)     // two more
	if n := Handoffs() - before; n != 4 {
		t.Fatalf("after Ones, Add and two Frees: %d handoffs, want 4", n)
	}
}

func TestNewScopeOffTheMLXThreadPanics(t *testing.T) {
	func() {
		defer func() {
			r := recover()
			if msg, _ := r.(string); !strings.Contains(msg, "mlx.Do") || !strings.Contains(msg, "mlx.Run") {
				t.Fatalf("NewScope off the MLX thread: recovered %v, want a panic naming mlx.Do and mlx.Run", r)
			}
		}()
		NewScope()
	}()
	// Run works from anywhere.
	var inside *Array
	out := Run(func() []*Array {
		inside = Ones([]int{2}, Float32)
		return []*Array{MulScalar(inside, 5)}
	})
	defer Free(out...)
	if inside.Valid() {
		t.Fatal("Run called off the MLX thread did not free an intermediate array")
	}
	if err := wantFloats("Run result", out[0], 5, 5); err != nil {
		t.Fatal(err)
	}
}

// TestScopesIgnoreArraysOfOtherGoroutines checks that a scope open on the
// MLX thread takes only the arrays made there: not those another goroutine
// makes through handed-over calls, and not those of later jobs when a job
// left it open.
func TestScopesIgnoreArraysOfOtherGoroutines(t *testing.T) {
	// A job that leaves its scope open: Do drops the scope when the job
	// ends, so the arrays of what runs next stay out of it.
	var leaked *Scope
	var inLeaked *Array
	_ = Do(func() error {
		leaked = NewScope()
		inLeaked = Ones([]int{2}, Float32)
		return nil
	})
	foreign := Ones([]int{2}, Float32)
	var later *Array
	_ = Do(func() error { later = Ones([]int{2}, Float32); return nil })
	leaked.Close()
	for name, a := range map[string]*Array{"another goroutine's": foreign, "a later job's": later, "the dropped scope's": inLeaked} {
		if !a.Valid() {
			t.Errorf("closing a scope a job left open freed %s array", name)
		}
	}
	Free(foreign, later, inLeaked)

	// Scopes open and close on the MLX thread without pause while other
	// goroutines make arrays through handed-over calls. An array joins the
	// scope only when the call that made it ran on the MLX thread directly;
	// if registration looked at the MLX thread's open scope instead, the
	// scopes would free the other goroutines' arrays under them.
	stop := make(chan struct{})
	scoped := make(chan error, 1)
	go func() {
		var err error
		for n := 0; err == nil; n++ {
			select {
			case <-stop:
				scoped <- nil
				return
			default:
			}
			err = Do(func() error {
				s := NewScope()
				defer s.Close()
				for range 20 {
					if err := Ones([]int{1}, Float32).Err(); err != nil {
						return err
					}
					runtime.Gosched() // let handed-over calls' goroutines run while the scope is open
				}
				return nil
			})
		}
		scoped <- err
	}()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				v := float32(1000*g + i)
				a := FromSlice([]float32{v})
				b := AddScalar(a, 1)
				runtime.Gosched()
				err := wantFloats("x+1", b, v+1)
				if err == nil && !a.Valid() {
					err = errors.New("its input was freed")
				}
				Free(a, b)
				if err != nil {
					t.Errorf("goroutine %d, array %d: %v", g, i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	if err := <-scoped; err != nil {
		t.Fatal(err)
	}
}

// TestFreeFromAnyGoroutine frees arrays, a closure and a value-and-grad
// function made on the MLX thread from another goroutine.
func TestFreeFromAnyGoroutine(t *testing.T) {
	const n = 1 << 18 // 1 MiB of float32
	var a *Array
	if err := Do(func() error { a = Ones([]int{n}, Float32); return Eval(a) }); err != nil {
		t.Fatal(err)
	}
	held := Memory().Active
	done := make(chan struct{})
	go func() { a.Free(); close(done) }()
	<-done
	if a.Valid() {
		t.Fatal("freed array is still valid")
	}
	if now := Memory().Active; now > held-4*n+(64<<10) {
		t.Fatalf("freeing a 1 MiB array from another goroutine left active memory at %d (was %d)", now, held)
	}
	c, err := Compile(countingAffine(new(atomic.Int32)))
	if err != nil {
		t.Fatal(err)
	}
	vg, err := ValueAndGrad(func(in []*Array) ([]*Array, error) { return []*Array{Sum(in[0])}, nil }, 0)
	if err != nil {
		t.Fatal(err)
	}
	done = make(chan struct{})
	go func() { c.Free(); vg.Free(); close(done) }()
	<-done
	if _, err := c.Call(Ones([]int{1}, Float32)); err == nil {
		t.Fatal("a freed closure can still be called")
	}
}

// TestBridgeSymbolsArePrefixed checks the package's compiled archive, which
// holds the bridge's C and C++ objects: it defines the bridge's functions as
// ptlm_*, and nothing as mlx_*, the prefix of MLX's own C API (mlx-c), which
// a process may load beside it. (The test binary itself carries no symbol
// table: go test links it with -s. After a change to the package, go list
// compiles the plain package once, bridge included, which takes a minute.)
func TestBridgeSymbolsArePrefixed(t *testing.T) {
	archive, err := exec.Command("go", "list", "-export", "-f", "{{.Export}}", ".").Output()
	if err != nil {
		t.Fatalf("go list -export: %v", err)
	}
	path := strings.TrimSpace(string(archive))
	out, err := exec.Command("go", "tool", "nm", path).CombinedOutput()
	if err != nil {
		t.Fatalf("go tool nm %s: %v\n%s", path, err, out)
	}
	defined := map[string]bool{}
	var mlxNamed []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		// "archive(object.o):  address type name", no address when undefined
		f := strings.Fields(sc.Text())
		if len(f) < 3 || f[len(f)-2] == "U" {
			continue
		}
		name := f[len(f)-1]
		defined[name] = true
		if strings.HasPrefix(name, "mlx_") {
			mlxNamed = append(mlxNamed, name)
		}
	}
	for _, name := range []string{"ptlm_eval", "ptlm_claim_thread", "ptlm_on_mlx_thread", "ptlm_add"} {
		if !defined[name] {
			t.Errorf("%s defines no %s: its symbols were not read", path, name)
		}
	}
	if len(mlxNamed) > 0 {
		t.Errorf("the bridge defines %d symbols named mlx_*: %v", len(mlxNamed), mlxNamed[:min(len(mlxNamed), 10)])
	}
}

// TestDoWaitsInOrder checks that jobs from different goroutines do not
// overlap on the MLX thread.
func TestDoWaitsInOrder(t *testing.T) {
	var running atomic.Int32
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = Do(func() error {
				if running.Add(1) != 1 {
					t.Error("two Do jobs ran at once")
				}
				time.Sleep(100 * time.Microsecond)
				running.Add(-1)
				return nil
			})
		}()
	}
	wg.Wait()
}

// Await on the MLX thread serves another goroutine's MLX work until that
// goroutine is done, and leaves the waiting computation's scope as it was:
// the training loop waits this way for a generation engine's rollouts.
func TestAwaitServesOtherGoroutinesOnTheMLXThread(t *testing.T) {
	var got float64
	err := Do(func() error {
		s := NewScope()
		defer s.Close()
		mine := Scalar(2, Float32)
		done := make(chan struct{})
		var inner float64
		var innerErr error
		go func() {
			defer close(done)
			innerErr = Do(func() error {
				inner2 := NewScope()
				defer inner2.Close()
				v, err := Add(Scalar(3, Float32), Scalar(4, Float32)).Item()
				inner = v
				return err
			})
		}()
		Await(done)
		if innerErr != nil {
			return innerErr
		}
		if inner != 7 {
			return fmt.Errorf("the other goroutine's sum is %v, want 7", inner)
		}
		if topScope != s {
			return errors.New("Await did not restore the caller's scope")
		}
		v, err := Multiply(mine, Scalar(inner, Float32)).Item()
		got = v
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if got != 14 {
		t.Fatalf("2 × 7 = %v after Await, want 14", got)
	}
}
