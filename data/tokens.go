package data

import (
	"encoding/binary"
	"fmt"
)

// Tokens is a read-only sequence of token ids, usually a memory-mapped
// token file (see ReadTokenFile and OpenTokens).
//
// Its methods may be called from several goroutines at once, but not
// after or during Close. Indexing out of range panics, as slicing does.
type Tokens struct {
	info    TokenFileInfo
	path    string
	payload []byte // n tokens of info.Width bytes, little-endian
	n       int
	release func() error
	// parts, when set, are the shards these tokens concatenate (see
	// ConcatTokens); ends[k] is the index just past part k.
	parts []*Tokens
	ends  []int
}

// NewTokens returns Tokens holding a copy of ids in memory, for small data
// and tests. Its Info has Width 4 and Count len(ids) and nothing else.
func NewTokens(ids []int32) *Tokens {
	payload := make([]byte, 4*len(ids))
	for i, id := range ids {
		binary.LittleEndian.PutUint32(payload[4*i:], uint32(id))
	}
	return &Tokens{
		info:    TokenFileInfo{Width: 4, Count: len(ids)},
		payload: payload,
		n:       len(ids),
	}
}

// Info returns the header of the token file the tokens came from.
func (t *Tokens) Info() TokenFileInfo { return t.info }

// Path returns the token file's path, or "" for NewTokens.
func (t *Tokens) Path() string { return t.path }

// Len returns the number of tokens.
func (t *Tokens) Len() int { return t.n }

// At returns token i.
func (t *Tokens) At(i int) int32 {
	if uint(i) >= uint(t.n) {
		panic(fmt.Sprintf("data: token index %d out of range [0,%d)", i, t.n))
	}
	if t.parts != nil {
		k := t.partOf(i)
		return t.parts[k].At(i - t.partStart(k))
	}
	if t.info.Width == 2 {
		return int32(binary.LittleEndian.Uint16(t.payload[2*i:]))
	}
	return int32(binary.LittleEndian.Uint32(t.payload[4*i:]))
}

// CopyInto copies tokens [start, start+len(dst)) into dst.
func (t *Tokens) CopyInto(dst []int32, start int) {
	if start < 0 || start > t.n || len(dst) > t.n-start {
		panic(fmt.Sprintf("data: token range [%d,%d) out of range [0,%d)", start, start+len(dst), t.n))
	}
	if t.parts != nil {
		t.copyFromParts(dst, start)
		return
	}
	if t.info.Width == 2 {
		src := t.payload[2*start : 2*(start+len(dst))]
		for i := range dst {
			dst[i] = int32(binary.LittleEndian.Uint16(src[2*i:]))
		}
		return
	}
	src := t.payload[4*start : 4*(start+len(dst))]
	for i := range dst {
		dst[i] = int32(binary.LittleEndian.Uint32(src[4*i:]))
	}
}

// View returns the tokens [start, end) as a View, without copying.
func (t *Tokens) View(start, end int) View {
	if start < 0 || end < start || end > t.n {
		panic(fmt.Sprintf("data: token view [%d,%d) out of range [0,%d)", start, end, t.n))
	}
	return View{tokens: t, start: start, end: end}
}

// All returns a View of every token.
func (t *Tokens) All() View { return t.View(0, t.n) }

// Close releases the memory mapping, or every shard's. It is safe to call
// more than once.
func (t *Tokens) Close() error {
	if t.parts != nil {
		return t.closeParts()
	}
	release := t.release
	t.release, t.payload, t.n = nil, nil, 0
	if release == nil {
		return nil
	}
	if err := release(); err != nil {
		return fmt.Errorf("token file %q: unmapping: %w", t.path, err)
	}
	return nil
}

// View is a window [start, end) of Tokens, such as the train or validation
// part of a Split. It is a small value: copying it copies no tokens.
type View struct {
	tokens     *Tokens
	start, end int
}

// Len returns the number of tokens in the view.
func (v View) Len() int { return v.end - v.start }

// Bounds returns the view's range in its Tokens.
func (v View) Bounds() (start, end int) { return v.start, v.end }

// At returns token i of the view.
func (v View) At(i int) int32 {
	if uint(i) >= uint(v.Len()) {
		panic(fmt.Sprintf("data: view index %d out of range [0,%d)", i, v.Len()))
	}
	return v.tokens.At(v.start + i)
}

// CopyInto copies tokens [start, start+len(dst)) of the view into dst.
func (v View) CopyInto(dst []int32, start int) {
	if start < 0 || start > v.Len() || len(dst) > v.Len()-start {
		panic(fmt.Sprintf("data: view range [%d,%d) out of range [0,%d)", start, start+len(dst), v.Len()))
	}
	v.tokens.CopyInto(dst, v.start+start)
}
