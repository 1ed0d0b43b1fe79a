package generate

import (
	"math"
	"math/rand/v2"

	"github.com/posttrainllm/posttrainllm/mlx"
)

// sampleRows picks each row's next token from logits [S, ≥vocab]: the
// most likely one where temp is 0, otherwise one drawn from the softmax of
// logits/temp restricted to the topK most likely tokens (topK [S], int32;
// the vocabulary size for no limit) and then to the smallest set of most
// likely tokens whose probabilities add up to at least topP ([S]; above 1
// for no limit). The draw is by inverse CDF with the row's uniform number
// u in (0, 1] ([S]), which the engine takes from the row's own random
// stream, so a row's tokens do not depend on the rows beside it. mode
// says what the batch's rows need: greedy rows alone skip the draw, and
// rows without top-k or top-p skip the sort those need.
//
// It returns the tokens [S] (int32), their log-probabilities [S] under
// the model's distribution (the softmax of the logits at temperature 1),
// the numbers online RL and prompt scoring need, and the most likely token
// [S] (int32) with its log-probability [S] (the logprobs field of OpenAI's
// API reports it beside the sampled one). A pure function of its inputs,
// so it traces into the engine's compiled decode step.
func sampleRows(logits, temp, topK, topP, u *mlx.Array, vocab int, mode samplingMode) (tokens, logprobs, top, topLogprobs *mlx.Array) {
	S := logits.Dim(0)
	logits = mlx.AsType(mlx.Slice(logits, []int{0, 0}, []int{S, vocab}), mlx.Float32)
	greedy := mlx.AsType(mlx.Argmax(logits, -1, false), mlx.Int32)
	col := func(a *mlx.Array) *mlx.Array { return mlx.Reshape(a, S, 1) }
	// A token's log-probability is its logit less log Σ exp(logits): the
	// chosen logits are gathered first, so no [S, V] array of
	// log-probabilities is formed.
	logZ := mlx.LogSumExpKeep(logits, -1)
	logprobOf := func(ids *mlx.Array) *mlx.Array {
		return mlx.Reshape(mlx.Subtract(mlx.TakeAlongAxis(logits, col(ids), -1), logZ), S)
	}
	topLogprobs = logprobOf(greedy)
	if mode == greedyRows {
		return greedy, topLogprobs, greedy, topLogprobs
	}
	hot := mlx.Greater(temp, mlx.Scalar(0, mlx.Float32))
	scaled := mlx.Divide(logits, col(mlx.Where(hot, temp, mlx.Scalar(1, mlx.Float32))))
	negInf := mlx.Scalar(math.Inf(-1), mlx.Float32)
	if mode == filteredRows {
		desc := mlx.Negative(mlx.Sort(mlx.Negative(scaled), -1)) // [S, V], most likely first
		rank := mlx.Reshape(mlx.Arange(0, float64(vocab), 1, mlx.Int32), 1, vocab)
		desc = mlx.Where(mlx.GreaterEqual(rank, col(topK)), negInf, desc)
		probs := mlx.Softmax(desc, -1)
		before := mlx.CumSum(probs, -1, false, false) // mass of the tokens ranked above each
		kept := mlx.Sum(mlx.AsType(mlx.Less(before, col(topP)), mlx.Int32), -1)
		last := mlx.Subtract(mlx.Maximum(kept, mlx.Scalar(1, mlx.Int32)), mlx.Scalar(1, mlx.Int32))
		threshold := mlx.TakeAlongAxis(desc, col(last), -1)
		scaled = mlx.Where(mlx.Less(scaled, threshold), negInf, scaled)
	}
	cdf := mlx.CumSum(mlx.Softmax(scaled, -1), -1, false, true)
	total := mlx.Slice(cdf, []int{0, vocab - 1}, []int{S, vocab})
	below := mlx.Less(cdf, mlx.Multiply(col(u), total))
	drawn := mlx.Sum(mlx.AsType(below, mlx.Int32), -1)
	drawn = mlx.Minimum(drawn, mlx.Scalar(float64(vocab-1), mlx.Int32))
	tokens = mlx.Where(hot, drawn, greedy)
	logprobs = logprobOf(tokens)
	return tokens, logprobs, greedy, topLogprobs
}

// samplingMode is what a batch's rows need of sampleRows.
type samplingMode int

const (
	greedyRows   samplingMode = iota // every row takes its most likely token
	drawnRows                        // some rows draw, none limits by top-k or top-p
	filteredRows                     // some rows limit by top-k or top-p
)

// rowSampling is one row's sampling settings as sampleRows takes them.
type rowSampling struct {
	temp  float32
	topK  int32
	topP  float32
	rng   *rand.Rand // the row's uniform draws; nil for greedy rows
	limit bool       // top-k or top-p limits the row's tokens
}

// newRowSampling returns the settings of s for the index-th completion
// of a request: each completion of one prompt draws from its own stream
// of the request's seed.
func newRowSampling(s Sampling, vocab int, index int) rowSampling {
	r := rowSampling{temp: float32(s.Temperature), topK: int32(vocab), topP: 2}
	if s.Temperature == 0 {
		return r
	}
	r.rng = rand.New(rand.NewPCG(s.Seed, uint64(index)))
	if s.TopK > 0 && s.TopK < vocab {
		r.topK, r.limit = int32(s.TopK), true
	}
	if s.TopP > 0 && s.TopP < 1 {
		r.topP, r.limit = float32(s.TopP), true
	}
	return r
}

// draw returns the row's next uniform number in (0, 1]; greedy rows take 1.
func (s rowSampling) draw() float32 {
	if s.rng == nil {
		return 1
	}
	return float32(1 - s.rng.Float64())
}

// samplingInputs are sampleRows' per-row inputs for a batch of rows (nil
// entries, free slots, decode greedily and are ignored).
func samplingInputs(rows []*rowSampling) (temp, topK, topP, u *mlx.Array, mode samplingMode) {
	n := len(rows)
	t, k, p, us := make([]float32, n), make([]int32, n), make([]float32, n), make([]float32, n)
	for i, r := range rows {
		if r == nil {
			k[i], p[i], us[i] = math.MaxInt32, 2, 1
			continue
		}
		t[i], k[i], p[i], us[i] = r.temp, r.topK, r.topP, r.draw()
		switch {
		case r.limit:
			mode = filteredRows
		case r.rng != nil:
			mode = max(mode, drawnRows)
		}
	}
	return mlx.FromSlice(t, n), mlx.FromSlice(k, n), mlx.FromSlice(p, n), mlx.FromSlice(us, n), mode
}
