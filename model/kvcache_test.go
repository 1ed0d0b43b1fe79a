package model

import (
	"math"
	"testing"

	"github.com/posttrainllm/posttrainllm/internal/mlxtest"
	"github.com/posttrainllm/posttrainllm/mlx"
)

// A cache truncated to its first positions continues as if only those had
// been fed: after 9 tokens, truncated to 4, the next 5 other tokens give
// the logits of the whole other sequence computed at once, for every
// family. Truncating beyond what the cache holds is an error.
func TestTruncatedCacheContinues(t *testing.T) {
	for name, c := range familyConfigs() {
		mlxtest.Run(t, func(t testing.TB) {
			m, err := New(c)
			if err != nil {
				t.Fatal(err)
			}
			params, err := m.Init(3)
			if err != nil {
				t.Fatal(err)
			}
			defer mlx.Free(params...)
			const T, keep = 9, 4
			first := tokens(t, 1, T, c.VocabSize, 4)
			other := tokens(t, 1, T, c.VocabSize, 5)
			head, err := first.Int32s()
			if err != nil {
				t.Fatal(err)
			}
			tail, err := other.Int32s()
			if err != nil {
				t.Fatal(err)
			}
			seq := append(append([]int32(nil), head[:keep]...), tail[keep:]...)
			full, err := m.Logits(params, mlx.FromSlice(seq, 1, T)).Float32s()
			if err != nil {
				t.Fatal(err)
			}
			cache := m.NewKVCache()
			defer cache.Free()
			if err := m.LogitsCached(params, first, cache).Err(); err != nil {
				t.Fatal(err)
			}
			if err := cache.Truncate(T + 1); err == nil {
				t.Fatalf("%s: truncating a %d-position cache to %d succeeded", name, T, T+1)
			}
			if err := cache.Truncate(keep); err != nil || cache.Offset != keep {
				t.Fatalf("%s: truncate: %v, offset %d", name, err, cache.Offset)
			}
			got, err := m.LogitsCached(params, mlx.FromSlice(seq[keep:], 1, T-keep), cache).Float32s()
			if err != nil {
				t.Fatal(err)
			}
			V := c.PaddedVocab()
			for i := range T - keep {
				for v := range V {
					g, w := got[i*V+v], full[(keep+i)*V+v]
					if math.Abs(float64(g-w)) > 1e-4*(1+math.Abs(float64(w))) {
						t.Fatalf("%s: position %d logit %d: %g after truncation, %g at once", name, keep+i, v, g, w)
					}
				}
			}
		})
	}
}

// The cache's buffers grow kvChunk positions at a time: tokens fed one by
// one across the first buffer's end, then after a truncation into it,
// give the logits of the whole sequence computed at once, on a global
// layer and on sliding ones.
func TestCacheGrowsPastItsBuffer(t *testing.T) {
	families := familyConfigs()
	for _, name := range []string{"llama", "mistral", "gemma3"} {
		c := families[name]
		c.Context = kvChunk + 16
		mlxtest.Run(t, func(t testing.TB) {
			m, params := initModel(t, c, 5)
			defer mlx.Free(params...)
			const head, after = kvChunk - 3, 6 // positions read at once, then one by one
			T := head + after
			ids, err := tokens(t, 1, T, c.VocabSize, 6).Int32s()
			if err != nil {
				t.Fatal(err)
			}
			V := c.PaddedVocab()
			check := func(what string, seq []int32, from int, got []float32) {
				t.Helper()
				full, err := m.Logits(params, mlx.FromSlice(seq, 1, len(seq))).Float32s()
				if err != nil {
					t.Fatal(err)
				}
				for i := range len(got) / V {
					for v := range V {
						g, w := got[i*V+v], full[(from+i)*V+v]
						if math.Abs(float64(g-w)) > 1e-4*(1+math.Abs(float64(w))) {
							t.Fatalf("%s %s: position %d logit %d: %g cached, %g at once", name, what, from+i, v, g, w)
						}
					}
				}
			}
			cache := m.NewKVCache()
			defer cache.Free()
			if err := m.LogitsCached(params, mlx.FromSlice(ids[:head], 1, head), cache).Err(); err != nil {
				t.Fatal(err)
			}
			var got []float32
			for p := head; p < T; p++ {
				step, err := m.LogitsCached(params, mlx.FromSlice(ids[p:p+1], 1, 1), cache).Float32s()
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, step...)
			}
			check("one by one", ids, head, got)
			back := kvChunk - 1
			if err := cache.Truncate(back); err != nil {
				t.Fatal(err)
			}
			other := append(append([]int32(nil), ids[:back]...), (ids[back]+1)%int32(c.VocabSize), (ids[back+1]+2)%int32(c.VocabSize))
			got, err = m.LogitsCached(params, mlx.FromSlice(other[back:], 1, 2), cache).Float32s()
			if err != nil {
				t.Fatal(err)
			}
			check("after truncation", other, back, got)
		})
	}
}
