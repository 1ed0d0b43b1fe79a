package model

import (
	"fmt"

	"github.com/posttrainllm/posttrainllm/mlx"
)

// PrefixLossTerms is LossTermsWith for rows that continue shared prompts,
// computing each prompt once for all the rows that continue it: online
// RL trains on groups of completions of one prompt, and a row per
// completion would run the prompt's positions through every block once
// per completion.
//
// prompts [P, S] (int32) are the prompts' tokens but each prompt's last,
// laid from position 0 (the rest of a row is never read by the rows that
// continue it). Row b of x [B, C] (int32) continues prompt group[b] ([B],
// int32) from position start[b] ([B], int32): x[b, 0] is that prompt's
// last token, at position start[b], and the row attends to the prompt's
// positions 0…start[b]−1 and causally to its own. ce and lse, [B, C]
// float32 each, are the terms of targets y [B, C], as LossTermsWith gives
// them for the rows laid out whole (prompt then continuation), up to
// rounding. The gradients reach the prompt's positions through every row
// that reads them. lin may be nil.
//
// The prompt pass and the continuation pass run without the output head
// on the prompts; neither is recomputed under Memory.Checkpoint.
func (m *Transformer) PrefixLossTerms(params []*mlx.Array, lin Linears, prompts, x, y, start, group *mlx.Array) (ce, lse *mlx.Array) {
	fail := func(err error) (*mlx.Array, *mlx.Array) { return mlx.ErrorArray(err), mlx.ErrorArray(err) }
	if err := checkTargets(x, y); err != nil {
		return fail(err)
	}
	for _, a := range []*mlx.Array{prompts, start, group} {
		if err := a.Err(); err != nil {
			return fail(err)
		}
	}
	B, C := x.Dim(0), x.Dim(1)
	if prompts.Ndim() != 2 || start.Ndim() != 1 || start.Dim(0) != B || group.Ndim() != 1 || group.Dim(0) != B ||
		prompts.Dtype().IsFloat() || start.Dtype().IsFloat() || group.Dtype().IsFloat() {
		return fail(fmt.Errorf("model: prefix loss of rows %v over prompts %v, starts %v, groups %v: want prompts [P, S], starts and groups [%d] integers",
			x.Shape(), prompts.Shape(), start.Shape(), group.Shape(), B))
	}
	if S := prompts.Dim(1); S+C > m.Config.Context {
		return fail(fmt.Errorf("model: prompts of %d positions and rows of %d: past the context of %d", S, C, m.Config.Context))
	}
	f := m.formulation()
	if lin != nil {
		if err := m.setLinears(&f, lin); err != nil {
			return fail(err)
		}
	}
	rec := &promptStore{}
	m.forwardTo(params, prompts, rec, f, func(*Transformer, formulation, *mlx.Array, *mlx.Array) []*mlx.Array { return nil })
	if rec.err != nil {
		return fail(rec.err)
	}
	cont := &continuationStore{prompts: rec, from: mlx.AsType(start, mlx.Int32), group: mlx.AsType(group, mlx.Int32)}
	yRows := mlx.Reshape(y, B*C)
	out := m.forwardTo(params, x, cont, f, func(m *Transformer, f formulation, h, head *mlx.Array) []*mlx.Array {
		ce, lse := m.headTerms(f, h, head, yRows)
		return []*mlx.Array{ce, lse}
	})
	if err := out[0].Err(); err != nil {
		return fail(err)
	}
	return mlx.Reshape(out[0], B, C), mlx.Reshape(out[1], B, C)
}

// promptStore is the kvStore of PrefixLossTerms' prompt pass: positions
// from 0, causal, each layer's keys and values kept for the rows that
// continue the prompts.
type promptStore struct {
	keys, values []*mlx.Array // per layer, [P, KVHeads, S, HeadDim]
	err          error
}

func (p *promptStore) check(cfg Config, B, T int) error {
	p.keys, p.values = make([]*mlx.Array, cfg.Layers), make([]*mlx.Array, cfg.Layers)
	return nil
}

func (p *promptStore) start() (int, *mlx.Array) { return 0, nil }

func (p *promptStore) store(l int, k, v *mlx.Array) (*mlx.Array, *mlx.Array, mlx.AttentionMask, *mlx.Array) {
	if p.err == nil {
		p.err = k.Err()
	}
	p.keys[l], p.values[l] = k, v
	return k, v, mlx.CausalMask, nil
}

func (p *promptStore) advance(int) {}

// continuationStore is the kvStore of PrefixLossTerms' second pass: row b
// sits at positions start[b]… and reads prompt group[b]'s keys and values
// before its own.
type continuationStore struct {
	prompts     *promptStore
	from, group *mlx.Array // [B] int32: each row's first position and prompt
	keyPos      *mlx.Array // [B, 1, 1, S+C]: each key's position, −1 for a prompt position past the row's start
	queryPos    *mlx.Array // [B, 1, C, 1]
	visible     *mlx.Array // [B, 1, C, S+C]: the keys each query attends to
}

func (c *continuationStore) check(cfg Config, B, T int) error {
	if len(c.prompts.keys) != cfg.Layers {
		return fmt.Errorf("model: prefix loss: the prompt pass holds %d layers, the model has %d", len(c.prompts.keys), cfg.Layers)
	}
	S := c.prompts.keys[0].Dim(2)
	steps := mlx.Reshape(mlx.Arange(0, float64(T), 1, mlx.Int32), 1, T)
	rowPos := mlx.Add(mlx.Reshape(c.from, B, 1), steps) // [B, T]
	promptPos := mlx.BroadcastTo(mlx.Reshape(mlx.Arange(0, float64(S), 1, mlx.Int32), 1, S), B, S)
	seen := mlx.Less(promptPos, mlx.Reshape(c.from, B, 1))
	promptPos = mlx.Where(seen, promptPos, mlx.Scalar(-1, mlx.Int32))
	c.keyPos = mlx.Reshape(mlx.Concatenate([]*mlx.Array{promptPos, rowPos}, 1), B, 1, 1, S+T)
	c.queryPos = mlx.Reshape(rowPos, B, 1, T, 1)
	c.visible = mlx.LogicalAnd(mlx.GreaterEqual(c.keyPos, mlx.Scalar(0, mlx.Int32)), mlx.LessEqual(c.keyPos, c.queryPos))
	return nil
}

func (c *continuationStore) start() (int, *mlx.Array) { return 0, c.from }

func (c *continuationStore) store(l int, k, v *mlx.Array) (*mlx.Array, *mlx.Array, mlx.AttentionMask, *mlx.Array) {
	keys := mlx.Concatenate([]*mlx.Array{mlx.Take(c.prompts.keys[l], c.group, 0), k}, 2)
	values := mlx.Concatenate([]*mlx.Array{mlx.Take(c.prompts.values[l], c.group, 0), v}, 2)
	return keys, values, mlx.NoMask, c.visible
}

func (c *continuationStore) advance(int) {}

// windowMask keeps each query to the keys within window positions of its
// own (sliding-window layers).
func (c *continuationStore) windowMask(_ mlx.AttentionMask, maskArr *mlx.Array, window int) (mlx.AttentionMask, *mlx.Array) {
	lowest := mlx.Subtract(c.queryPos, mlx.Scalar(float64(window), mlx.Int32))
	return mlx.NoMask, mlx.LogicalAnd(maskArr, mlx.Greater(c.keyPos, lowest))
}
