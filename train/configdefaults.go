package train

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"

	"github.com/posttrainllm/posttrainllm/data"
)

// WithLR returns c with peak learning rate lr and its floor moved with it:
// MinLR keeps its ratio to LR (a preset's curve, e.g. a tenth of the
// peak), so a rate below the old floor still decays rather than failing
// validation or running flat. A config whose LR is not positive takes
// MinLR = lr·DefaultMinLRRatio.
func (c Config) WithLR(lr float64) Config {
	ratio := DefaultMinLRRatio
	if c.LR > 0 && c.MinLR >= 0 && c.MinLR <= c.LR {
		ratio = c.MinLR / c.LR
	}
	c.LR, c.MinLR = lr, lr*ratio
	return c
}

// DefaultMinLRRatio is min_lr / lr where nothing else sets it: the floor
// of cosine and wsd schedules at a tenth of the peak, as the presets use.
const DefaultMinLRRatio = 0.1

// WithTokenizer returns c training with the tokenizer called name. When
// name is another tokenizer than c's and its vocabulary is known (byte,
// gpt2), the model's vocabulary becomes exactly that size; PadVocabTo
// still pads it as c's model does. The same tokenizer, or one whose
// vocabulary comes with a run (hf), leaves the model as it is.
func (c Config) WithTokenizer(name string) Config {
	if name != c.Tokenizer {
		if v, err := data.TokenizerVocabSize(name); err == nil {
			c.Model.VocabSize = v
		}
	}
	c.Tokenizer = name
	return c
}

// FitWarmup shrinks a warm-up that does not fit the steps (a preset's, or
// a default's, over a short run) to half of them; a constant schedule has
// no warm-up to fit.
func (c Config) FitWarmup() Config {
	if c.Schedule != "constant" && c.Steps >= 1 && c.Warmup >= c.Steps {
		c.Warmup = c.Steps / 2
	}
	return c
}

// EpochSteps is how many updates of batch × accum sequences pass over
// rows training sequences epochs times: ceil(epochs · rows / (batch ·
// accum)), the last update of a pass topped up from the next (the row
// sampler draws without replacement, pass after pass).
func EpochSteps(epochs float64, rows, batch, accum int) (int, error) {
	per := batch * accum
	switch {
	case !(epochs > 0) || math.IsInf(epochs, 0):
		return 0, fmt.Errorf("epochs = %g, want a finite number > 0", epochs)
	case rows < 1:
		return 0, fmt.Errorf("epochs over %d training sequences, want at least 1", rows)
	case per < 1:
		return 0, fmt.Errorf("batch × accum = %d × %d, want >= 1", batch, accum)
	}
	steps := math.Ceil(epochs * float64(rows) / float64(per))
	if steps > math.MaxInt32 {
		return 0, fmt.Errorf("epochs = %g over %d sequences is %g steps, too many", epochs, rows, steps)
	}
	return max(1, int(steps)), nil
}

// FirstDifference names the first setting, by its JSON name (model
// settings as model.NAME), in which a and b differ, or returns "".
func FirstDifference(a, b Config) string {
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	if errA != nil || errB != nil {
		return "config"
	}
	k, va, vb, ok := firstDifferentField(ja, jb)
	switch {
	case !ok:
		return "config"
	case k == "model":
		if f, _, _, ok := firstDifferentField(va, vb); ok && f != "" {
			return "model." + f
		}
	}
	return k
}

// firstDifferentField returns the first key, in sorted order, whose value
// differs between the JSON objects a and b, with both values; "" when
// none does. ok is false when either is not an object.
func firstDifferentField(a, b json.RawMessage) (key string, va, vb json.RawMessage, ok bool) {
	var ma, mb map[string]json.RawMessage
	if json.Unmarshal(a, &ma) != nil || json.Unmarshal(b, &mb) != nil {
		return "", nil, nil, false
	}
	keys := make([]string, 0, len(ma)+len(mb))
	for k := range ma {
		keys = append(keys, k)
	}
	for k := range mb {
		if _, ok := ma[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !bytes.Equal(ma[k], mb[k]) {
			return k, ma[k], mb[k], true
		}
	}
	return "", nil, nil, true
}
