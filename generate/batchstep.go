package generate

import (
	"slices"

	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
)

// read feeds this round's prompt chunks into their slots: the rows that
// ask for prompt scores one by one (every position's logits), the others
// together, in one forward pass (PrefillSlots) where their padded chunks
// fit the cache. The groups whose prompts are then read start decoding
// (startGroups). Call on the MLX thread.
func (b *batch) read(params []*mlx.Array, reads []readPlan) error {
	var done []readDone
	var together []readPlan
	for _, rd := range reads {
		if !rd.r.job.seq.PromptLogprobs {
			together = append(together, rd)
			continue
		}
		last, err := b.readScored(params, rd)
		if err != nil {
			return err
		}
		if rd.end == len(rd.r.job.seq.Prompt) {
			done = append(done, readDone{rd.r, last})
		}
	}
	// Chunks are padded to the longest; a row whose padded chunk would run
	// past the cache's capacity is read on its own.
	C := 0
	for _, rd := range together {
		C = max(C, rd.end-rd.start)
	}
	var batches [][]readPlan
	var fits []readPlan
	for _, rd := range together {
		if rd.start+C > b.cache.Capacity() {
			batches = append(batches, []readPlan{rd})
		} else {
			fits = append(fits, rd)
		}
	}
	if len(fits) > 0 {
		batches = append(batches, fits)
	}
	for _, batch := range batches {
		d, err := b.readTogether(params, batch)
		if err != nil {
			return err
		}
		done = append(done, d...)
	}
	if len(done) == 0 {
		return mlx.Eval(b.cache.Arrays()...)
	}
	return b.startGroups(done)
}

// readTogether feeds the chunks of reads in one forward pass, each padded
// to the longest, and returns the rows whose prompts are then read.
func (b *batch) readTogether(params []*mlx.Array, reads []readPlan) ([]readDone, error) {
	vocab, R, C := b.e.net.Config.VocabSize, len(reads), 0
	for _, rd := range reads {
		C = max(C, rd.end-rd.start)
	}
	ids := make([]int32, R*C)
	slots, starts, lengths := make([]int, R), make([]int, R), make([]int, R)
	idx := make([]int, 0, R*C)
	for i, rd := range reads {
		copy(ids[i*C:], rd.r.job.seq.Prompt[rd.start:rd.end])
		slots[i], starts[i], lengths[i] = rd.r.slot, rd.start, rd.end-rd.start
		var err error
		if idx, err = b.repeatAdapter(idx, rd.r, C); err != nil {
			return nil, err
		}
	}
	lin, err := b.linears(params, idx)
	if err != nil {
		return nil, err
	}
	logits := b.e.net.PrefillSlotsWith(params, lin, b.cache, slots, starts, lengths, mlx.FromSlice(ids, R, C))
	logits = mlx.AsType(mlx.Slice(logits, []int{0, 0}, []int{R, vocab}), mlx.Float32)
	var done []readDone
	for i, rd := range reads {
		b.e.stats.prefilled.Add(int64(rd.end - rd.start))
		rd.r.length = rd.end
		if rd.end == len(rd.r.job.seq.Prompt) {
			done = append(done, readDone{rd.r, mlx.Slice(logits, []int{i, 0}, []int{i + 1, vocab})})
		}
	}
	return done, nil
}

// readDone is a group leader whose prompt is read, with the logits
// [1, vocab] (float32) of its last position.
type readDone struct {
	r    *row
	last *mlx.Array
}

// readScored feeds a chunk of a row's prompt that asks for prompt scores
// and scores its positions; it returns the logits [1, vocab] (float32) of
// the chunk's last position.
func (b *batch) readScored(params []*mlx.Array, rd readPlan) (*mlx.Array, error) {
	r, seq, vocab := rd.r, rd.r.job.seq, b.e.net.Config.VocabSize
	n := rd.end - rd.start
	tokens := mlx.FromSlice(seq.Prompt[rd.start:rd.end], 1, n)
	idx, err := b.repeatAdapter(nil, r, n)
	if err != nil {
		return nil, err
	}
	lin, err := b.linears(params, idx)
	if err != nil {
		return nil, err
	}
	logits := b.e.net.PrefillSlotWith(params, lin, b.cache, r.slot, rd.start, tokens, true)
	logits = mlx.AsType(mlx.Slice(logits, []int{0, 0}, []int{n, vocab}), mlx.Float32)
	b.e.stats.prefilled.Add(int64(n))
	r.length = rd.end
	if rd.start == 0 {
		r.stream.result.Prompt = append(r.stream.result.Prompt, PromptScore{})
	}
	if err := b.score(r, logits, rd); err != nil {
		return nil, err
	}
	return mlx.Slice(logits, []int{n - 1, 0}, []int{n, vocab}), nil
}

// startGroups samples the first token of every completion of the groups
// whose prompts are read, from their leader's last logits, and copies the
// prompt's keys and values into the other rows' slots: they decode from
// the next step on.
func (b *batch) startGroups(done []readDone) error {
	vocab := b.e.net.Config.VocabSize
	var rows []*row
	var parts []*mlx.Array
	var samplings []*rowSampling
	for _, d := range done {
		for _, g := range d.r.group {
			rows, parts, samplings = append(rows, g), append(parts, d.last), append(samplings, &g.sampling)
			if g != d.r && g.slot >= 0 {
				b.cache.CopySlot(d.r.slot, g.slot, d.r.length)
			}
		}
	}
	temp, topK, topP, u, mode := samplingInputs(samplings)
	ids, lps, top, topLps := sampleRows(mlx.Concatenate(parts, 0), temp, topK, topP, u, vocab, mode)
	if err := mlx.Eval(append([]*mlx.Array{ids, lps, top, topLps}, b.cache.Arrays()...)...); err != nil {
		return err
	}
	host, err := sampled(ids, lps, top, topLps)
	if err != nil {
		return err
	}
	for i, g := range rows {
		if g.slot < 0 {
			continue // ended while the prompt was read
		}
		leader := g.group[0]
		if g != leader {
			g.stream.result.Prompt = leader.stream.result.Prompt
		}
		g.length, g.state = leader.length, decoding
		b.accept(g, host.at(i), g.length)
	}
	return nil
}

// score appends to r's prompt scores those of the prompt positions whose
// context is the chunk read: position i's score comes from the logits of
// position i−1 ([n, vocab], float32).
func (b *batch) score(r *row, logits *mlx.Array, rd readPlan) error {
	prompt, vocab := r.job.seq.Prompt, logits.Dim(1)
	m := min(rd.end-rd.start, len(prompt)-1-rd.start) // positions rd.start+1 … rd.start+m
	if m <= 0 {
		return nil
	}
	lp := mlx.Subtract(logits, mlx.LogSumExpKeep(logits, -1))
	lp = mlx.Slice(lp, []int{0, 0}, []int{m, vocab})
	targets := mlx.FromSlice(prompt[rd.start+1:rd.start+1+m], m, 1)
	given := mlx.Reshape(mlx.TakeAlongAxis(lp, targets, -1), m)
	top := mlx.AsType(mlx.Argmax(lp, -1, false), mlx.Int32)
	topLp := mlx.Max(lp, -1)
	if err := mlx.Eval(given, top, topLp); err != nil {
		return err
	}
	g, err := given.Float32s()
	if err != nil {
		return err
	}
	t, err := top.Int32s()
	if err != nil {
		return err
	}
	tl, err := topLp.Float32s()
	if err != nil {
		return err
	}
	for i := range m {
		r.stream.result.Prompt = append(r.stream.result.Prompt, PromptScore{Logprob: g[i], Top: t[i], TopLogprob: tl[i], HasLogprobs: true})
	}
	return nil
}

// decoded is a scheduled decode step: its outputs (the sampled tokens,
// their log-probabilities, the most likely tokens and theirs) and, by
// slot, the rows it decoded with the positions their slots then held.
type decoded struct {
	outs [4]*mlx.Array
	rows []*row
	fed  []int
}

// decodeStep schedules the next decode step of every decoding row and
// then reads the step before it. A row's token is the last step's sampled
// token, taken on the device, or its first (from its prompt) from the
// host. Rows still reading their prompt (or waiting for it) are fed a
// placeholder at their next position, which their own prompt overwrites.
// The step is evaluated asynchronously: its results are read by the next
// round (collect). Call on the MLX thread.
func (b *batch) decodeStep(params []*mlx.Array) error {
	S, capacity, longest := b.cache.Slots(), b.cache.Capacity(), 0
	prev := b.inFlight
	tokens, positions := make([]int32, S), make([]int32, S)
	fromHost := make([]bool, S)
	samplings := make([]*rowSampling, S)
	next := &decoded{rows: make([]*row, S), fed: make([]int, S)}
	onDevice := false
	idx := slices.Repeat([]int{-1}, S) // each slot's adapter, for the rows fed
	for s, r := range b.rows {
		if r == nil {
			continue
		}
		positions[s] = int32(min(r.length, capacity-1))
		longest = max(longest, r.length)
		// A row at the end of the context ends when the step in flight is
		// read; it is not fed again.
		if r.state != decoding || r.length >= capacity {
			continue
		}
		if prev != nil && prev.rows[s] == r {
			onDevice = true
		} else {
			tokens[s], fromHost[s] = r.next, true
		}
		samplings[s] = &r.sampling
		a, err := b.adapterOf(r)
		if err != nil {
			return err
		}
		idx[s] = a
		r.length++
		next.rows[s], next.fed[s] = r, r.length
	}
	temp, topK, topP, u, mode := samplingInputs(samplings)
	layout := ""
	if anyAdapter(idx) {
		layout = b.adapters.rows.Layout()
	}
	step, err := b.decoder(mode, layout)
	if err != nil {
		return err
	}
	fed := mlx.FromSlice(tokens, S)
	if onDevice {
		fed = mlx.Where(mlx.FromSlice(fromHost, S), fed, prev.outs[0])
	}
	L := len(b.cache.Keys)
	// Attention reads the slots up to the next power of two past the
	// longest row, not the whole capacity.
	span := min(capacity, pow2(max(longest+1, 32)))
	inputs := append(append(append([]*mlx.Array(nil), params...), b.cache.Arrays()...),
		fed, mlx.FromSlice(positions, S), mlx.Arange(0, float64(span), 1, mlx.Int32), temp, topK, topP, u)
	if layout != "" {
		extra, err := b.adapterInputs(idx)
		if err != nil {
			return err
		}
		inputs = append(inputs, extra...)
	}
	outs, err := step.Call(inputs...)
	if err != nil {
		return err
	}
	b.cache.Free()
	copy(b.cache.Keys, outs[4:4+L])
	copy(b.cache.Values, outs[4+L:])
	copy(next.outs[:], outs[:4])
	if err := mlx.AsyncEval(outs...); err != nil {
		return err
	}
	rows := 0
	for _, r := range next.rows {
		if r != nil {
			rows++
		}
	}
	b.e.stats.steps.Add(1)
	b.e.stats.decoded.Add(int64(rows))
	if int64(rows) > b.e.stats.maxRows.Load() {
		b.e.stats.maxRows.Store(int64(rows))
	}
	b.inFlight = next
	if prev == nil {
		return nil
	}
	return b.take(prev)
}

// collect reads the step in flight. Call on the MLX thread.
func (b *batch) collect() error {
	d := b.inFlight
	b.inFlight = nil
	if d == nil {
		return nil
	}
	return b.take(d)
}

// take reads step d's results and hands each row's token to accept,
// skipping the rows that ended since d was scheduled; it frees d's
// outputs.
func (b *batch) take(d *decoded) error {
	defer mlx.Free(d.outs[:]...)
	host, err := sampled(d.outs[0], d.outs[1], d.outs[2], d.outs[3])
	if err != nil {
		return err
	}
	for s, r := range d.rows {
		if r != nil && r.slot == s && r.state == decoding {
			b.accept(r, host.at(s), d.fed[s])
		}
	}
	return nil
}

// dropInFlight forgets the step in flight, freeing its outputs.
func (b *batch) dropInFlight() {
	if d := b.inFlight; d != nil {
		b.inFlight = nil
		mlx.Do(func() error { mlx.Free(d.outs[:]...); return nil })
	}
}

// hostSamples are sampleRows' outputs on the host.
type hostSamples struct {
	ids, top    []int32
	lps, topLps []float32
}

// at is row i's token.
func (h hostSamples) at(i int) Token {
	return Token{ID: h.ids[i], Logprob: h.lps[i], Top: h.top[i], TopLogprob: h.topLps[i]}
}

// sampled copies sampleRows' outputs, evaluated, to the host.
func sampled(ids, lps, top, topLps *mlx.Array) (h hostSamples, err error) {
	if h.ids, err = ids.Int32s(); err != nil {
		return h, err
	}
	if h.top, err = top.Int32s(); err != nil {
		return h, err
	}
	if h.lps, err = lps.Float32s(); err != nil {
		return h, err
	}
	h.topLps, err = topLps.Float32s()
	return h, err
}

// decoder returns the decode step of sampling mode mode, compiled on
// first use (or op by op with Interpreted). Its inputs are the
// parameters, the cache's keys and values, the tokens and positions [S],
// the span attention reads and the sampling inputs; its outputs the
// sampled tokens, their log-probabilities, the most likely tokens and
// their log-probabilities, and the cache's new keys and values. A step
// with adapter rows has a layout (the stacked adapters', peft.Rows.Layout)
// and takes adapterInputs' arrays after the sampling inputs; a step of
// base rows alone has layout "".
func (b *batch) decoder(mode samplingMode, layout string) (*mlx.Closure, error) {
	i := int(mode)
	steps := &b.decode
	if layout != "" {
		if b.adapted == nil {
			b.adapted = map[string]*[3]*mlx.Closure{}
		}
		if b.adapted[layout] == nil {
			b.adapted[layout] = &[3]*mlx.Closure{}
		}
		steps = b.adapted[layout]
	}
	if steps[i] != nil {
		return steps[i], nil
	}
	net, e := b.e.net, b.e
	P, L, vocab := len(net.Specs), net.Config.Layers, net.Config.VocabSize
	fn := func(in []*mlx.Array) ([]*mlx.Array, error) {
		if !e.opts.Interpreted {
			e.stats.traces.Add(1)
		}
		cache := &model.SlotCache{Keys: append([]*mlx.Array(nil), in[P:P+L]...), Values: append([]*mlx.Array(nil), in[P+L:P+2*L]...)}
		x := in[P+2*L:]
		var lin model.Linears
		if layout != "" {
			// Traced or run while the loop's adapters have this layout:
			// the step of another layout is another closure.
			lin = b.decodeLinears(in[:P], x[7:])
		}
		logits := net.DecodeSlotsWith(in[:P], lin, cache, x[0], x[1], x[2])
		ids, lps, top, topLps := sampleRows(logits, x[3], x[4], x[5], x[6], vocab, mode)
		return append([]*mlx.Array{ids, lps, top, topLps}, cache.Arrays()...), nil
	}
	var err error
	if e.opts.Interpreted {
		steps[i], err = mlx.NewClosure(fn)
	} else {
		steps[i], err = mlx.Compile(fn)
	}
	return steps[i], err
}
