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
