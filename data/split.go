package data

import "fmt"

// DefaultValFraction is the share of tokens Split holds out for validation
// by default.
const DefaultValFraction = 0.1

// Split cuts t into a training view, the first tokens, and a validation
// view, the last floor(Len*valFraction) tokens. Holding out the end rather
// than random windows keeps validation text unseen in training, apart from
// the one boundary. Both views must fit at least one window of context
// tokens plus its shifted target, context+1 tokens.
func Split(t *Tokens, valFraction float64, context int) (train, val View, err error) {
	n := t.Len()
	if !(valFraction > 0 && valFraction < 1) {
		return View{}, View{}, fmt.Errorf("split %d tokens: validation fraction %v, want a number in (0, 1)", n, valFraction)
	}
	if context < 1 {
		return View{}, View{}, fmt.Errorf("split %d tokens: context %d, want at least 1", n, context)
	}
	nVal := int(float64(n) * valFraction)
	nTrain := n - nVal
	need := uint64(context) + 1 // context+1 overflows int for context = MaxInt
	if nTrain <= context || nVal <= context {
		return View{}, View{}, fmt.Errorf(
			"split %d tokens at validation fraction %v: train has %d tokens and validation %d, each needs at least context+1 = %d (context %d); use a larger corpus or a smaller context",
			n, valFraction, nTrain, nVal, need, context)
	}
	return t.View(0, nTrain), t.View(nTrain, n), nil
}
