package data

import (
	"math"
	"strings"
	"testing"
)

func TestSplit(t *testing.T) {
	tok := NewTokens(seq(1000))
	train, val, err := Split(tok, DefaultValFraction, 16)
	if err != nil {
		t.Fatal(err)
	}
	ts, te := train.Bounds()
	vs, ve := val.Bounds()
	if ts != 0 || te != 900 || vs != 900 || ve != 1000 {
		t.Errorf("Split(1000 tokens, 0.1) = train [%d,%d) val [%d,%d), want [0,900) [900,1000)", ts, te, vs, ve)
	}
	if train.At(0) != 0 || val.At(0) != 900 || val.At(99) != 999 {
		t.Errorf("views read the wrong tokens: train[0] %d val[0] %d val[99] %d", train.At(0), val.At(0), val.At(99))
	}
	// The views share the Tokens' storage rather than copying it.
	if train.tokens != tok || val.tokens != tok {
		t.Error("Split views do not refer to the original Tokens")
	}
	// Odd sizes round the validation part down.
	_, val, err = Split(NewTokens(seq(105)), 0.1, 4)
	if err != nil || val.Len() != 10 {
		t.Errorf("Split(105 tokens, 0.1): val %d tokens, %v; want 10", val.Len(), err)
	}
}

func TestSplitErrors(t *testing.T) {
	tok := NewTokens(seq(100))
	for _, tc := range []struct {
		frac    float64
		context int
		want    []string
	}{
		{0.1, 10, []string{"100 tokens", "train has 90 tokens and validation 10", "context+1 = 11", "context 10"}},
		{0.5, 50, []string{"train has 50 tokens and validation 50", "context+1 = 51"}},
		{0.95, 8, []string{"train has 5 tokens and validation 95", "context+1 = 9"}},
		{0, 4, []string{"validation fraction 0, want a number in (0, 1)"}},
		{1, 4, []string{"validation fraction 1,"}},
		{math.NaN(), 4, []string{"validation fraction NaN"}},
		{0.1, 0, []string{"context 0, want at least 1"}},
	} {
		_, _, err := Split(tok, tc.frac, tc.context)
		if err == nil {
			t.Errorf("Split(100 tokens, %v, %d) succeeded, want error", tc.frac, tc.context)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("Split(100 tokens, %v, %d): error %q does not contain %q", tc.frac, tc.context, err, w)
			}
		}
	}
	// The boundary case fits exactly.
	if _, _, err := Split(tok, 0.1, 9); err != nil {
		t.Errorf("Split(100 tokens, 0.1, context 9) = %v, want success (10 validation tokens = context+1)", err)
	}
}
