package data

import (
	"fmt"
	"runtime"
	"sync"
)

// EncodeCorpus tokenizes the documents of c in order and passes their ids
// to emit, with a single EOT between consecutive documents (none before the
// first or after the last). Documents are read and encoded on all CPUs;
// emit is called on the caller's goroutine, in order, and may keep no
// reference to ids after it returns.
//
// It fails if a file cannot be read, if the files no longer hash to
// c.Hash, or when emit fails.
func EncodeCorpus(c *Corpus, tok Tokenizer, emit func(ids []int32) error) error {
	type result struct {
		text []byte
		ids  []int32
		err  error
	}
	workers := runtime.GOMAXPROCS(0)
	// At most window documents are read but not yet emitted, bounding
	// memory while keeping every worker busy. Document i's result goes to
	// ring[i%window]: by the time document i+window is dispatched,
	// document i has been emitted, so its slot is free.
	window := 2 * workers
	ring := make([]chan result, window)
	for i := range ring {
		ring[i] = make(chan result, 1)
	}
	var (
		jobs  = make(chan int)
		slots = make(chan struct{}, window)
		done  = make(chan struct{})
		wg    sync.WaitGroup
	)
	defer wg.Wait()
	defer close(done)

	wg.Go(func() {
		defer close(jobs)
		for i := range c.Files {
			select {
			case slots <- struct{}{}:
			case <-done:
				return
			}
			select {
			case jobs <- i:
			case <-done:
				return
			}
		}
	})
	for range workers {
		wg.Go(func() {
			for i := range jobs {
				text, err := c.ReadFile(i)
				var ids []int32
				if err == nil {
					ids = tok.Encode(string(text))
				}
				ring[i%window] <- result{text, ids, err}
			}
		})
	}

	h := newCorpusHasher(c.Options)
	eot := []int32{tok.EOT()}
	for i := range c.Files {
		r := <-ring[i%window]
		<-slots
		if r.err != nil {
			return r.err
		}
		h.add(c.Files[i].Rel, r.text)
		if i > 0 {
			if err := emit(eot); err != nil {
				return err
			}
		}
		if err := emit(r.ids); err != nil {
			return err
		}
	}
	if got := h.sum(); got != c.Hash {
		return fmt.Errorf("corpus %q: %w: hash %s, was %s", c.Root, errCorpusChanged, got, c.Hash)
	}
	return nil
}
