package data

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// seq returns the ids 0, 1, ..., n-1.
func seq(n int) []int32 {
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = int32(i)
	}
	return ids
}

// mustPanic runs f and fails unless it panics with a message containing
// want.
func mustPanic(t *testing.T, want string, f func()) {
	t.Helper()
	defer func() {
		t.Helper()
		r := recover()
		if r == nil {
			t.Errorf("no panic, want one containing %q", want)
			return
		}
		if msg, _ := r.(string); !strings.Contains(msg, want) {
			t.Errorf("panic %v, want one containing %q", r, want)
		}
	}()
	f()
}

func TestTokensViews(t *testing.T) {
	// The same ids through both storage widths and both constructors.
	mapped := func() *Tokens {
		path := filepath.Join(t.TempDir(), "v.tok")
		if err := WriteTokenFile(path, TokenFileMeta{"byte", 256, testHash}, seq(100)); err != nil {
			t.Fatal(err)
		}
		tok, err := ReadTokenFile(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tok.Close() })
		return tok
	}()
	for name, tok := range map[string]*Tokens{"memory": NewTokens(seq(100)), "mapped": mapped} {
		if tok.Len() != 100 || tok.At(99) != 99 {
			t.Errorf("%s: Len %d, At(99) %d", name, tok.Len(), tok.At(99))
		}
		v := tok.View(10, 30)
		if start, end := v.Bounds(); v.Len() != 20 || start != 10 || end != 30 {
			t.Errorf("%s: View(10,30) has Len %d, Bounds %d,%d", name, v.Len(), start, end)
		}
		dst := make([]int32, 5)
		v.CopyInto(dst, 15)
		if !slices.Equal(dst, []int32{25, 26, 27, 28, 29}) || v.At(0) != 10 {
			t.Errorf("%s: view CopyInto(_, 15) = %v, At(0) = %d", name, dst, v.At(0))
		}
		if all := tok.All(); all.Len() != 100 || all.At(50) != 50 {
			t.Errorf("%s: All() Len %d At(50) %d", name, all.Len(), all.At(50))
		}
		mustPanic(t, "token index 100 out of range [0,100)", func() { tok.At(100) })
		mustPanic(t, "token range [98,101)", func() { tok.CopyInto(make([]int32, 3), 98) })
		mustPanic(t, "token view [5,101)", func() { tok.View(5, 101) })
		mustPanic(t, "view index 20 out of range [0,20)", func() { v.At(20) })
		mustPanic(t, "view range [18,21)", func() { v.CopyInto(make([]int32, 3), 18) })
		mustPanic(t, "view range [-1,0)", func() { v.CopyInto(make([]int32, 1), -1) })
	}
}

func TestTokensClose(t *testing.T) {
	tok := NewTokens(seq(3))
	if err := tok.Close(); err != nil {
		t.Fatal(err)
	}
	if tok.Len() != 0 {
		t.Errorf("Len after Close = %d, want 0", tok.Len())
	}
}
