package mlx

import (
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"
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
// calls) ends the calling goroutine, not the MLX thread.
func TestDoPassesGoexitOn(t *testing.T) {
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
		if err := Do(func() error {
			if !onMLXThread() {
				return errors.New("Do ran fn off the MLX thread")
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
}
