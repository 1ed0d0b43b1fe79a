package mlx

import (
	"errors"
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
