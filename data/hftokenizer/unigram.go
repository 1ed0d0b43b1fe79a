package hftokenizer

import (
	"encoding/json"
	"fmt"
	"math"
	"unicode/utf8"
)

// wordModel is the model of a tokenizer.json: BPE or Unigram. It maps one
// pre-tokenized word to ids.
type wordModel interface {
	// encode appends the ids of word to ids.
	encode(ids []int32, word string) []int32
	// vocabulary maps every token of the model to its id.
	vocabulary() map[string]int32
}

func (b *bpeModel) vocabulary() map[string]int32 { return b.vocab }

// parseModel reads the model of tokenizer.json: BPE or Unigram.
func parseModel(raw json.RawMessage) (wordModel, error) {
	var head struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	if head.Type == "Unigram" {
		return parseUnigram(raw)
	}
	if head.Type != "BPE" {
		return nil, fmt.Errorf("model type %q is not supported; want BPE or Unigram", head.Type)
	}
	return parseBPE(raw)
}

// unkPenalty is how much less than the lowest-scored token an unknown
// character scores (tokenizers' and SentencePiece's kUnkPenalty).
const unkPenalty = 10.0

// unigramModel is the Unigram model of a tokenizer.json (SentencePiece's
// unigram language model), encoding as tokenizers does: the segmentation
// of a word into tokens whose scores sum highest (Viterbi over its
// characters), a character no token begins with taking the unknown token
// at the lowest score less unkPenalty; runs of unknown characters fuse
// into one piece, which becomes its UTF-8 bytes' tokens <0xXX> with
// byte_fallback, else the unknown token.
type unigramModel struct {
	vocab        map[string]int32
	scores       []float64
	unk          int32 // -1 without an unknown token
	byteFallback bool
	minScore     float64
	maxLen       int // the longest token, in bytes
}

// parseUnigram reads a Unigram model.
func parseUnigram(raw json.RawMessage) (*unigramModel, error) {
	var m struct {
		UnkID        *int              `json:"unk_id"`
		Vocab        []json.RawMessage `json:"vocab"`
		ByteFallback bool              `json:"byte_fallback"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	u := &unigramModel{vocab: make(map[string]int32, len(m.Vocab)), scores: make([]float64, len(m.Vocab)),
		unk: -1, byteFallback: m.ByteFallback, minScore: math.Inf(1)}
	for id, r := range m.Vocab {
		var entry []json.RawMessage
		var piece string
		if err := json.Unmarshal(r, &entry); err != nil || len(entry) != 2 || json.Unmarshal(entry[0], &piece) != nil ||
			json.Unmarshal(entry[1], &u.scores[id]) != nil {
			return nil, fmt.Errorf("model: vocabulary entry %d is %s, want [token, score]", id, r)
		}
		if _, dup := u.vocab[piece]; !dup {
			u.vocab[piece] = int32(id)
		}
		u.minScore = min(u.minScore, u.scores[id])
		u.maxLen = max(u.maxLen, len(piece))
	}
	if m.UnkID != nil {
		if *m.UnkID < 0 || *m.UnkID >= len(m.Vocab) {
			return nil, fmt.Errorf("model: unk_id %d is not one of the %d tokens", *m.UnkID, len(m.Vocab))
		}
		u.unk = int32(*m.UnkID)
	}
	return u, nil
}

func (u *unigramModel) vocabulary() map[string]int32 { return u.vocab }

// unigramNode is the best segmentation found of a word's prefix ending at
// one byte: its last token's id and start, and its score; start < 0 where
// none is known yet.
type unigramNode struct {
	id    int32
	start int
	score float64
}

// encode appends the ids of word to ids.
func (u *unigramModel) encode(ids []int32, word string) []int32 {
	if word == "" {
		return ids
	}
	n := len(word)
	best := make([]unigramNode, n+1)
	for i := range best {
		best[i].start = -1
	}
	unkScore := u.minScore - unkPenalty
	for start := 0; start < n; {
		_, size := utf8.DecodeRuneInString(word[start:])
		here := best[start].score
		single := false
		for end := start + 1; end <= n && end-start <= u.maxLen; end++ {
			if end < n && !utf8.RuneStart(word[end]) {
				continue // tokens end where characters do
			}
			id, ok := u.vocab[word[start:end]]
			if !ok {
				continue
			}
			if cand := here + u.scores[id]; best[end].start < 0 || cand > best[end].score {
				best[end] = unigramNode{id: id, start: start, score: cand}
			}
			if end-start == size {
				single = true
			}
		}
		if !single {
			end := start + size
			if cand := here + unkScore; best[end].start < 0 || cand > best[end].score {
				best[end] = unigramNode{id: u.unk, start: start, score: cand}
			}
		}
		start += size
	}
	// Back from the end: the pieces in reverse, runs of unknowns fused.
	var pieces []string
	unkEnd := -1
	for end := n; end > 0; end = best[end].start {
		node := best[end]
		if node.id == u.unk && u.unk >= 0 || node.id < 0 {
			if unkEnd < 0 {
				unkEnd = end
			}
			continue
		}
		if unkEnd >= 0 {
			pieces = append(pieces, word[end:unkEnd])
			unkEnd = -1
		}
		pieces = append(pieces, word[node.start:end])
	}
	if unkEnd >= 0 {
		pieces = append(pieces, word[:unkEnd])
	}
	for i := len(pieces) - 1; i >= 0; i-- {
		ids = u.appendPiece(ids, pieces[i])
	}
	return ids
}

// appendPiece appends the id of one piece of the segmentation: its token,
// or for a run of unknown characters its byte tokens (byte_fallback) or
// the unknown token.
func (u *unigramModel) appendPiece(ids []int32, piece string) []int32 {
	if id, ok := u.vocab[piece]; ok {
		return append(ids, id)
	}
	if u.byteFallback {
		bytes := make([]int32, 0, len(piece))
		for k := 0; k < len(piece); k++ {
			id, ok := u.vocab[fmt.Sprintf("<0x%02X>", piece[k])]
			if !ok {
				bytes = nil
				break
			}
			bytes = append(bytes, id)
		}
		if bytes != nil {
			return append(ids, bytes...)
		}
	}
	if u.unk >= 0 {
		return append(ids, u.unk)
	}
	return ids
}
