package data

import (
	"slices"
	"strings"
	"testing"
)

func TestSamplerWindows(t *testing.T) {
	const n, ctx = 200, 8
	// Tokens whose value is their index, viewed from an offset, make every
	// window's position visible in its contents.
	view := NewTokens(seq(n)).View(50, n)
	s, err := NewSampler(view, ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	x := make([]int32, 64*ctx)
	y := make([]int32, 64*ctx)
	seen := make(map[int32]bool)
	for range 20 {
		s.Fill(x, y)
		for w := 0; w < len(x); w += ctx {
			first := x[w]
			if first < 50 || first+ctx >= n {
				t.Fatalf("window starts at token %d, want a start in [50, %d]", first, n-ctx-1)
			}
			seen[first] = true
			for i := range ctx {
				if x[w+i] != first+int32(i) || y[w+i] != x[w+i]+1 {
					t.Fatalf("window at %d: x %v y %v, want consecutive tokens with y = x shifted by one",
						first, x[w:w+ctx], y[w:w+ctx])
				}
			}
		}
	}
	// 1280 draws over 142 starts: every start, including both ends,
	// should have come up.
	if len(seen) != view.Len()-ctx {
		t.Errorf("saw %d distinct starts, want all %d", len(seen), view.Len()-ctx)
	}
}

func TestSamplerDeterminism(t *testing.T) {
	view := NewTokens(seq(10000)).All()
	draw := func(seed uint64) []int32 {
		s, err := NewSampler(view, 16, seed)
		if err != nil {
			t.Fatal(err)
		}
		x, y := make([]int32, 4*16), make([]int32, 4*16)
		var out []int32
		for range 3 {
			s.Fill(x, y)
			out = append(out, x...)
		}
		return out
	}
	if !slices.Equal(draw(7), draw(7)) {
		t.Error("two samplers with seed 7 drew different windows")
	}
	if slices.Equal(draw(7), draw(8)) {
		t.Error("seeds 7 and 8 drew the same windows")
	}
}

func TestSamplerStateResumes(t *testing.T) {
	view := NewTokens(seq(5000)).All()
	a, _ := NewSampler(view, 32, 42)
	x, y := make([]int32, 2*32), make([]int32, 2*32)
	a.Fill(x, y)
	state, err := a.State()
	if err != nil {
		t.Fatal(err)
	}
	a.Fill(x, y)
	wantX, wantY := slices.Clone(x), slices.Clone(y)

	b, _ := NewSampler(view, 32, 999)
	if err := b.SetState(state); err != nil {
		t.Fatal(err)
	}
	b.Fill(x, y)
	if !slices.Equal(x, wantX) || !slices.Equal(y, wantY) {
		t.Error("sampler restored from State drew different windows than the original")
	}
}

func TestSamplerSetStateRejects(t *testing.T) {
	tok := NewTokens(seq(5000))
	s, _ := NewSampler(tok.All(), 32, 1)
	state, _ := s.State()
	other, _ := NewSampler(tok.View(0, 4000), 32, 1)
	otherCtx, _ := NewSampler(tok.All(), 16, 1)
	for _, tc := range []struct {
		name  string
		s     *Sampler
		state []byte
		want  string
	}{
		{"other view", other, state, "view of 5000 tokens with context 32, want a view of 4000 tokens with context 32"},
		{"other context", otherCtx, state, "want a view of 5000 tokens with context 16"},
		{"garbage", s, []byte("hello"), `5 bytes not starting with "PTLMSMP1"`},
		{"truncated", s, state[:len(state)-1], "sampler state"},
	} {
		err := tc.s.SetState(tc.state)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: SetState error %v, want it to contain %q", tc.name, err, tc.want)
		}
	}
}

func TestNewSamplerErrors(t *testing.T) {
	view := NewTokens(seq(10)).All()
	if _, err := NewSampler(view, 10, 1); err == nil || !strings.Contains(err.Error(), "view has 10 tokens, want at least context+1 = 11 (context 10)") {
		t.Errorf("view too short: err = %v", err)
	}
	if _, err := NewSampler(view, 0, 1); err == nil || !strings.Contains(err.Error(), "context 0") {
		t.Errorf("context 0: err = %v", err)
	}
	// The smallest view that fits has exactly one start.
	s, err := NewSampler(view, 9, 1)
	if err != nil {
		t.Fatal(err)
	}
	x, y := make([]int32, 9), make([]int32, 9)
	s.Fill(x, y)
	if x[0] != 0 || y[8] != 9 {
		t.Errorf("only window: x %v y %v", x, y)
	}
}

func TestSamplerFillPanicsOnBadShape(t *testing.T) {
	s, _ := NewSampler(NewTokens(seq(100)).All(), 8, 1)
	mustPanic(t, "len(x) = 12, len(y) = 12, want equal multiples of the context 8", func() {
		s.Fill(make([]int32, 12), make([]int32, 12))
	})
	mustPanic(t, "len(x) = 8, len(y) = 16", func() {
		s.Fill(make([]int32, 8), make([]int32, 16))
	})
}

func TestSamplerFillDoesNotAllocate(t *testing.T) {
	tok := NewTokens(seq(100000))
	s, _ := NewSampler(tok.All(), 64, 3)
	x, y := make([]int32, 8*64), make([]int32, 8*64)
	if allocs := testing.AllocsPerRun(100, func() { s.Fill(x, y) }); allocs != 0 {
		t.Errorf("Fill allocates %v times per call, want 0", allocs)
	}
}
