package hftokenizer

import (
	"container/heap"
	"fmt"
	"unicode/utf8"

	"github.com/sugarme/tokenizer"
	"github.com/sugarme/tokenizer/model/bpe"
)

// bpeModel is the BPE model of a tokenizer.json, applying the library's
// vocabulary and merges the way Hugging Face's tokenizers does in the two
// places where github.com/sugarme/tokenizer v0.3.0 differs from it: merges
// of equal rank apply leftmost first (the library breaks such ties
// arbitrarily, so a run like "\n\n\n" can split either way), and with
// byte_fallback a character outside the vocabulary becomes its UTF-8 bytes'
// tokens <0xXX> (the library returns the unknown token). Everything else —
// normaliser, pre-tokeniser, decoder, vocabulary — stays the library's.
type bpeModel struct {
	*bpe.BPE
	merges       bpe.Merges
	byteFallback bool
	fuseUnk      bool
	ignoreMerges bool
	unk          int // -1 without an unknown token
}

// newBPEModel wraps the library's BPE model m with the options of the file.
func newBPEModel(m tokenizer.Model, byteFallback, fuseUnk, ignoreMerges bool) (*bpeModel, error) {
	b, ok := m.(*bpe.BPE)
	if !ok {
		return nil, fmt.Errorf("model is %T, want BPE", m)
	}
	if b.ContinuingSubwordPrefix != nil && *b.ContinuingSubwordPrefix != "" || b.EndOfWordSuffix != nil && *b.EndOfWordSuffix != "" {
		return nil, fmt.Errorf("continuing_subword_prefix and end_of_word_suffix are not supported")
	}
	h := &bpeModel{BPE: b, merges: *b.Merges, byteFallback: byteFallback, fuseUnk: fuseUnk, ignoreMerges: ignoreMerges, unk: -1}
	if b.UnkToken != nil {
		if id, ok := b.TokenToId(*b.UnkToken); ok {
			h.unk = id
		}
	}
	return h, nil
}

// symbol is one piece of a word being merged: a token id and its byte
// span, linked to its neighbours (-1 at the ends); len 0 once merged away.
type symbol struct {
	id, start, end, prev, next int
}

// candidate is a merge of the symbols at pos and its next, with the
// merge's rank and the ids it expects there (stale once either changes).
type candidate struct {
	rank, pos, left, right, newID int
}

type candidates []candidate

func (c candidates) Len() int { return len(c) }
func (c candidates) Less(i, j int) bool {
	if c[i].rank != c[j].rank {
		return c[i].rank < c[j].rank
	}
	return c[i].pos < c[j].pos
}
func (c candidates) Swap(i, j int) { c[i], c[j] = c[j], c[i] }
func (c *candidates) Push(x any)   { *c = append(*c, x.(candidate)) }
func (c *candidates) Pop() any {
	old := *c
	x := old[len(old)-1]
	*c = old[:len(old)-1]
	return x
}

// Tokenize splits one pre-tokenised word into tokens.
func (h *bpeModel) Tokenize(word string) ([]tokenizer.Token, error) {
	if word == "" {
		return nil, nil
	}
	if h.ignoreMerges {
		if id, ok := h.TokenToId(word); ok {
			return []tokenizer.Token{{Id: id, Value: word, Offsets: []int{0, len(word)}}}, nil
		}
	}
	var syms []symbol
	add := func(id, start, end int) {
		syms = append(syms, symbol{id: id, start: start, end: end})
	}
	for i, r := range word {
		n := utf8.RuneLen(r)
		if n < 0 {
			n = 1
		}
		ch := word[i : i+n]
		if id, ok := h.TokenToId(ch); ok {
			add(id, i, i+n)
			continue
		}
		if h.byteFallback {
			ids, ok := h.byteIDs(ch)
			if ok {
				for k, id := range ids {
					add(id, i+k, i+k+1)
				}
				continue
			}
		}
		if h.unk < 0 {
			return nil, fmt.Errorf("character %q is not in the vocabulary and there is no unknown token", ch)
		}
		if last := len(syms) - 1; h.fuseUnk && last >= 0 && syms[last].id == h.unk && syms[last].end == i {
			syms[last].end = i + n
			continue
		}
		add(h.unk, i, i+n)
	}
	for i := range syms {
		syms[i].prev, syms[i].next = i-1, i+1
	}
	syms[len(syms)-1].next = -1
	var q candidates
	push := func(pos int) {
		next := syms[pos].next
		if next < 0 {
			return
		}
		if m, ok := h.merges[bpe.Pair{C1: syms[pos].id, C2: syms[next].id}]; ok {
			heap.Push(&q, candidate{rank: m.Rank, pos: pos, left: syms[pos].id, right: syms[next].id, newID: m.NewId})
		}
	}
	for i := range syms {
		push(i)
	}
	for q.Len() > 0 {
		c := heap.Pop(&q).(candidate)
		s := &syms[c.pos]
		if s.end == s.start || s.id != c.left || s.next < 0 || syms[s.next].id != c.right {
			continue // stale: a neighbour merged first
		}
		right := &syms[s.next]
		s.id, s.end, s.next = c.newID, right.end, right.next
		right.start, right.end = 0, 0
		if s.next >= 0 {
			syms[s.next].prev = c.pos
		}
		if s.prev >= 0 {
			push(s.prev)
		}
		push(c.pos)
	}
	var out []tokenizer.Token
	for i := 0; i >= 0; i = syms[i].next {
		s := syms[i]
		v, _ := h.IdToToken(s.id)
		out = append(out, tokenizer.Token{Id: s.id, Value: v, Offsets: []int{s.start, s.end}})
	}
	return out, nil
}

// byteIDs are the ids of the byte tokens <0xXX> of ch's bytes.
func (h *bpeModel) byteIDs(ch string) ([]int, bool) {
	ids := make([]int, len(ch))
	for k := 0; k < len(ch); k++ {
		id, ok := h.TokenToId(fmt.Sprintf("<0x%02X>", ch[k]))
		if !ok {
			return nil, false
		}
		ids[k] = id
	}
	return ids, true
}
