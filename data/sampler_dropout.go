package data

import (
	"math/rand/v2"
	"runtime"
	"sync"
)

// SetBPEDropout makes the sampler re-tokenise every window it draws with
// b, so each batch sees the text in a new segmentation. The view must hold
// GPT-2 ids. A window at start s is drawn as before; its text, the GPT-2
// tokens from s on decoded back to bytes, is encoded again with
// BPE-dropout (each document on its own, <|endoftext|> kept), and the
// first T+1 ids make x and y. The windows of a batch are encoded on all
// CPUs, each with a random stream seeded from the sampler's, so the ids
// depend only on the sampler state: a resumed run draws the same batches.
// Where the view ends before the re-encoded window has T+1 ids, the
// window keeps its GPT-2 ids. Pass nil to turn dropout off.
//
// Evaluation samplers are left without it: held-out loss is measured on
// the deterministic encoding.
func (s *Sampler) SetBPEDropout(b *BPEDropout) { s.dropout = b }

// dropoutWindow is one window to re-encode: its start and random seed.
type dropoutWindow struct {
	start int
	seed  uint64
}

// fillDropout is Fill with BPE-dropout.
func (s *Sampler) fillDropout(x, y []int32) {
	t := s.context
	windows := s.drawDropoutWindows(len(x) / t)
	var wg sync.WaitGroup
	next := make(chan int)
	for range min(runtime.GOMAXPROCS(0), len(windows)) {
		wg.Go(func() {
			var buf []int32
			for k := range next {
				buf = s.dropoutIDs(buf[:0], windows[k])
				copy(x[k*t:(k+1)*t], buf[:t])
				copy(y[k*t:(k+1)*t], buf[1:t+1])
			}
		})
	}
	for k := range windows {
		next <- k
	}
	close(next)
	wg.Wait()
}

// dropoutIDs appends at least T+1 ids of window w, re-encoded with
// BPE-dropout, to buf.
func (s *Sampler) dropoutIDs(buf []int32, w dropoutWindow) []int32 {
	t := s.context
	rng := rand.New(rand.NewPCG(w.seed, samplerSeed2))
	g := s.dropout.gpt2
	eot := g.EOT()
	var src []int32
	// Dropout makes segmentations finer, so the window's text usually
	// re-encodes into more ids than it had: start with a margin and
	// widen it in the rare case that is not enough.
	for span := t + 1 + t/2 + 16; ; span *= 2 {
		span = min(span, s.view.Len()-w.start)
		src = append(src[:0], make([]int32, span)...)
		s.view.CopyInto(src, w.start)
		out := buf[:0]
		for seg := src; len(seg) > 0 && len(out) <= t; {
			n := 0
			for n < len(seg) && seg[n] != eot {
				n++
			}
			out = s.dropout.Encode(out, g.Decode(seg[:n]), rng)
			if n < len(seg) {
				out = append(out, eot)
				n++
			}
			seg = seg[n:]
		}
		if len(out) > t {
			return out
		}
		if w.start+span == s.view.Len() {
			return append(out[:0], src[:t+1]...)
		}
	}
}

// drawDropoutWindows draws the start and re-encoding seed of n windows,
// on a Shard this rank's of the whole run's draw (keepDraws).
func (s *Sampler) drawDropoutWindows(n int) []dropoutWindow {
	starts := uint64(s.view.Len() - s.context)
	windows := make([]dropoutWindow, n)
	keepDraws(s.shard, n, func() dropoutWindow {
		start := int(s.rng.Uint64N(starts))
		return dropoutWindow{start: start, seed: s.rng.Uint64()}
	}, func(k int, w dropoutWindow) { windows[k] = w })
	return windows
}
