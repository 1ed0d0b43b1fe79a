package hftokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"
)

// bpeModel is the BPE model of a tokenizer.json, merging as tokenizers
// does: the lowest-ranked merge first and, among merges of equal rank,
// the leftmost; with byte_fallback a character outside the vocabulary
// becomes its UTF-8 bytes' tokens <0xXX>, else the unknown token (runs of
// them fused into one with fuse_unk), else nothing; with ignore_merges a
// word that is in the vocabulary is its token whole.
type bpeModel struct {
	vocab        map[string]int32
	merges       map[uint64]merge
	unk          int32 // -1 without an unknown token
	byteFallback bool
	fuseUnk      bool
	ignoreMerges bool

	// cache holds the tokens of words seen, up to cacheSize words, as
	// tokenizers' BPE cache does: pieces repeat a lot in text, and a
	// corpus has more distinct words than tokenizers' 10,000.
	mu    sync.RWMutex
	cache map[string][]int32
}

// cacheSize bounds the word cache: a few megabytes at most.
const cacheSize = 1 << 17

// merge is a merge's rank and the id of the token it makes.
type merge struct{ rank, id int32 }

// pairKey is the merges key of the pair of ids a, b.
func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// parseBPE reads the model of tokenizer.json, which must be BPE.
func parseBPE(raw json.RawMessage) (*bpeModel, error) {
	var m struct {
		Type                    string            `json:"type"`
		Vocab                   map[string]int32  `json:"vocab"`
		Merges                  []json.RawMessage `json:"merges"`
		UnkToken                *string           `json:"unk_token"`
		ByteFallback            bool              `json:"byte_fallback"`
		FuseUnk                 bool              `json:"fuse_unk"`
		IgnoreMerges            bool              `json:"ignore_merges"`
		ContinuingSubwordPrefix *string           `json:"continuing_subword_prefix"`
		EndOfWordSuffix         *string           `json:"end_of_word_suffix"`
		Dropout                 *float64          `json:"dropout"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	if m.Type != "BPE" {
		return nil, fmt.Errorf("model type %q is not supported; want BPE", m.Type)
	}
	if m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "" {
		return nil, fmt.Errorf("model: continuing_subword_prefix %q is not supported; want null", *m.ContinuingSubwordPrefix)
	}
	if m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "" {
		return nil, fmt.Errorf("model: end_of_word_suffix %q is not supported; want null", *m.EndOfWordSuffix)
	}
	if m.Dropout != nil && *m.Dropout != 0 {
		return nil, fmt.Errorf("model: dropout %v is not supported; want null (deterministic encoding)", *m.Dropout)
	}
	b := &bpeModel{vocab: m.Vocab, merges: make(map[uint64]merge, len(m.Merges)), unk: -1,
		byteFallback: m.ByteFallback, fuseUnk: m.FuseUnk, ignoreMerges: m.IgnoreMerges, cache: map[string][]int32{}}
	for id, tok := range m.Vocab {
		if id == "" || tok < 0 {
			return nil, fmt.Errorf("model: vocabulary entry %q: %d, want a non-empty token and an id >= 0", id, tok)
		}
	}
	if m.UnkToken != nil {
		id, ok := m.Vocab[*m.UnkToken]
		if !ok {
			return nil, fmt.Errorf("model: unk_token %q is not in the vocabulary", *m.UnkToken)
		}
		b.unk = id
	}
	for rank, r := range m.Merges {
		left, right, err := parseMerge(r)
		if err != nil {
			return nil, fmt.Errorf("model: merge %d: %w", rank, err)
		}
		l, okL := m.Vocab[left]
		rt, okR := m.Vocab[right]
		n, okN := m.Vocab[left+right]
		if !okL || !okR || !okN {
			return nil, fmt.Errorf("model: merge %d (%q, %q): a part or the merged token is not in the vocabulary", rank, left, right)
		}
		// A pair listed twice takes its last rank, as tokenizers' map
		// built from the list does.
		b.merges[pairKey(l, rt)] = merge{rank: int32(rank), id: n}
	}
	return b, nil
}

// parseMerge reads a merge written "left right" or ["left", "right"].
func parseMerge(raw json.RawMessage) (string, string, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		left, right, ok := strings.Cut(s, " ")
		if !ok || left == "" || right == "" {
			return "", "", fmt.Errorf("%q, want two tokens separated by a space", s)
		}
		return left, right, nil
	}
	var pair []string
	if err := json.Unmarshal(raw, &pair); err != nil || len(pair) != 2 {
		return "", "", fmt.Errorf("%s, want \"left right\" or [\"left\", \"right\"]", raw)
	}
	return pair[0], pair[1], nil
}

// symbol is one piece of a word being merged: a token id and its byte
// span, linked to its neighbours (-1 at the ends); len 0 once merged away.
type symbol struct {
	id                     int32
	start, end, prev, next int
}

// candidate is a merge of the symbols at pos and its next, with the
// merge's rank and the ids it expects there (stale once either changes).
type candidate struct {
	rank, left, right, newID int32
	pos                      int
}

// candidates is a binary min-heap of merges, lowest rank first and, among
// equal ranks, leftmost first (typed, so that pushing does not allocate as
// container/heap's interface does).
type candidates []candidate

// before orders the heap.
func (c candidates) before(i, j int) bool {
	if c[i].rank != c[j].rank {
		return c[i].rank < c[j].rank
	}
	return c[i].pos < c[j].pos
}

// push adds x.
func (c *candidates) push(x candidate) {
	*c = append(*c, x)
	h := *c
	for i := len(h) - 1; i > 0; {
		parent := (i - 1) / 2
		if !h.before(i, parent) {
			break
		}
		h[i], h[parent] = h[parent], h[i]
		i = parent
	}
}

// pop removes and returns the first merge; c is not empty.
func (c *candidates) pop() candidate {
	h := *c
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(h) && h.before(l, m) {
			m = l
		}
		if r < len(h) && h.before(r, m) {
			m = r
		}
		if m == i {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	*c = h
	return top
}

// encode appends the ids of one pre-tokenized word to ids.
func (b *bpeModel) encode(ids []int32, word string) []int32 {
	if word == "" {
		return ids
	}
	b.mu.RLock()
	cached, ok := b.cache[word]
	b.mu.RUnlock()
	if ok {
		return append(ids, cached...)
	}
	start := len(ids)
	ids = b.merge(ids, word)
	b.mu.Lock()
	if len(b.cache) < cacheSize {
		b.cache[word] = append([]int32(nil), ids[start:]...)
	}
	b.mu.Unlock()
	return ids
}

// merge appends the ids of word, merged, to ids.
func (b *bpeModel) merge(ids []int32, word string) []int32 {
	if b.ignoreMerges {
		if id, ok := b.vocab[word]; ok {
			return append(ids, id)
		}
	}
	syms := make([]symbol, 0, len(word))
	add := func(id int32, start, end int) {
		syms = append(syms, symbol{id: id, start: start, end: end})
	}
	for i, r := range word {
		n := utf8.RuneLen(r)
		if n < 0 {
			n = 1
		}
		ch := word[i : i+n]
		if id, ok := b.vocab[ch]; ok {
			add(id, i, i+n)
			continue
		}
		if b.byteFallback {
			if bytes, ok := b.byteIDs(ch); ok {
				for k, id := range bytes {
					add(id, i+k, i+k+1)
				}
				continue
			}
		}
		if b.unk < 0 {
			continue // tokenizers drops the character
		}
		if last := len(syms) - 1; b.fuseUnk && last >= 0 && syms[last].id == b.unk && syms[last].end == i {
			syms[last].end = i + n
			continue
		}
		add(b.unk, i, i+n)
	}
	if len(syms) == 0 {
		return ids
	}
	for i := range syms {
		syms[i].prev, syms[i].next = i-1, i+1
	}
	syms[len(syms)-1].next = -1
	q := make(candidates, 0, len(syms))
	push := func(pos int) {
		next := syms[pos].next
		if next < 0 {
			return
		}
		if m, ok := b.merges[pairKey(syms[pos].id, syms[next].id)]; ok {
			q.push(candidate{rank: m.rank, pos: pos, left: syms[pos].id, right: syms[next].id, newID: m.id})
		}
	}
	for i := range syms {
		push(i)
	}
	for len(q) > 0 {
		c := q.pop()
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
	for i := 0; i >= 0; i = syms[i].next {
		ids = append(ids, syms[i].id)
	}
	return ids
}

// byteIDs are the ids of the byte tokens <0xXX> of ch's bytes.
func (b *bpeModel) byteIDs(ch string) ([]int32, bool) {
	ids := make([]int32, len(ch))
	for k := 0; k < len(ch); k++ {
		id, ok := b.vocab[fmt.Sprintf("<0x%02X>", ch[k])]
		if !ok {
			return nil, false
		}
		ids[k] = id
	}
	return ids, true
}
