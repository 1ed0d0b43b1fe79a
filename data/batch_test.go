package data

import (
	"slices"
	"strings"
	"testing"
)

func TestFillBatchMatchesFill(t *testing.T) {
	view := NewTokens(seq(3000)).All()
	a, _ := NewSampler(view, 16, 5)
	b, _ := NewSampler(view, 16, 5)
	batch, err := NewBatch(2, 3, 16)
	if err != nil {
		t.Fatal(err)
	}
	if len(batch.X) != 2*3*16 || len(batch.Y) != 2*3*16 {
		t.Fatalf("NewBatch(2,3,16): len(X) %d len(Y) %d, want 96", len(batch.X), len(batch.Y))
	}
	x, y := make([]int32, 96), make([]int32, 96)
	for range 3 {
		if err := a.FillBatch(batch); err != nil {
			t.Fatal(err)
		}
		b.Fill(x, y)
		if !slices.Equal(batch.X, x) || !slices.Equal(batch.Y, y) {
			t.Fatal("FillBatch drew different windows than Fill with the same seed")
		}
		want, _ := b.State()
		if !slices.Equal(batch.State, want) {
			t.Fatal("batch State is not the sampler state after the batch")
		}
	}
}

func TestBatchShapeErrors(t *testing.T) {
	for _, tc := range []struct {
		n, b, t int
		want    string
	}{
		{0, 1, 1, "[N=0, B=1, T=1], want every dimension at least 1"},
		{1, -2, 1, "B=-2"},
		{1 << 40, 1 << 20, 1 << 10, "too many tokens"},
	} {
		if _, err := NewBatch(tc.n, tc.b, tc.t); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewBatch(%d,%d,%d): err = %v, want %q", tc.n, tc.b, tc.t, err, tc.want)
		}
	}
	s, _ := NewSampler(NewTokens(seq(100)).All(), 8, 1)
	wrongT, _ := NewBatch(1, 1, 4)
	if err := s.FillBatch(wrongT); err == nil || !strings.Contains(err.Error(), "batch T = 4, want the sampler context 8") {
		t.Errorf("FillBatch with T 4: err = %v", err)
	}
	short := &Batch{X: make([]int32, 8), Y: make([]int32, 8), N: 2, B: 1, T: 8}
	if err := s.FillBatch(short); err == nil || !strings.Contains(err.Error(), "len(X) = 8 and len(Y) = 8, want 16") {
		t.Errorf("FillBatch with short buffers: err = %v", err)
	}
}
