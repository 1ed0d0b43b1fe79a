package data

import (
	"fmt"
	"os"
	"path/filepath"
)

// ShardWriter cuts a stream of token ids into llm.c token shards named as
// llm.c's and modded-nanogpt's data scripts name them: PREFIX_val_000000.bin
// holds the first valTokens ids, then PREFIX_train_000000.bin,
// PREFIX_train_000001.bin, ... hold shardTokens ids each, the last one
// fewer. Each shard is written atomically when it is full or on Close, so
// at most one shard is in memory.
type ShardWriter struct {
	prefix      string
	vocabSize   int
	shardTokens int
	valLeft     int  // ids still owed to the validation shard
	inVal       bool // buf belongs to the validation shard
	buf         []int32
	trainIndex  int
	paths       []string
	tokens      int64
}

// NewShardWriter starts writing shards at prefix, a path without the
// "_train_NNNNNN.bin" suffix (for example "data/fineweb"), for ids in
// [0, vocabSize). It refuses to start if any shard it could write exists
// already, so nothing is overwritten.
func NewShardWriter(prefix string, vocabSize, shardTokens, valTokens int) (*ShardWriter, error) {
	if shardTokens < 1 || shardTokens > MaxShardTokens {
		return nil, fmt.Errorf("shard size %d tokens, want 1 to %d", shardTokens, MaxShardTokens)
	}
	if valTokens < 0 || valTokens > MaxShardTokens {
		return nil, fmt.Errorf("validation shard size %d tokens, want 0 to %d", valTokens, MaxShardTokens)
	}
	if vocabSize < 1 || int64(vocabSize) > 1<<32 {
		return nil, fmt.Errorf("vocabulary size %d, want 1 to %d", vocabSize, int64(1)<<32)
	}
	dir := filepath.Dir(prefix)
	if st, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("shard folder: %w", err)
	} else if !st.IsDir() {
		return nil, fmt.Errorf("shard folder %q is a %s, want a directory", dir, st.Mode().Type())
	}
	for _, split := range []string{"val", "train"} {
		existing, err := filepath.Glob(globEscape(prefix) + "_" + split + "_[0-9][0-9][0-9][0-9][0-9][0-9].bin")
		if err != nil {
			return nil, fmt.Errorf("shard prefix %q: %w", prefix, err)
		}
		if len(existing) > 0 {
			return nil, fmt.Errorf("shard prefix %q: %s exists already; remove the old shards or choose another prefix", prefix, existing[0])
		}
	}
	return &ShardWriter{
		prefix: prefix, vocabSize: vocabSize, shardTokens: shardTokens,
		valLeft: valTokens, inVal: valTokens > 0,
	}, nil
}

// globEscape escapes the glob metacharacters of a literal path.
func globEscape(s string) string {
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '*', '?', '[', '\\':
			out = append(out, '\\')
		}
		out = append(out, s[i])
	}
	return string(out)
}

// Write appends ids to the stream, writing every shard it fills.
func (w *ShardWriter) Write(ids []int32) error {
	for len(ids) > 0 {
		room := w.shardTokens - len(w.buf)
		if w.inVal {
			room = w.valLeft - len(w.buf)
		}
		n := min(room, len(ids))
		w.buf = append(w.buf, ids[:n]...)
		ids = ids[n:]
		if n == room {
			if err := w.flush(); err != nil {
				return err
			}
		}
	}
	return nil
}

// flush writes the buffered ids as the next shard.
func (w *ShardWriter) flush() error {
	var path string
	if w.inVal {
		path = fmt.Sprintf("%s_val_%06d.bin", w.prefix, 0)
		w.inVal = false
	} else {
		path = fmt.Sprintf("%s_train_%06d.bin", w.prefix, w.trainIndex)
		w.trainIndex++
	}
	if err := WriteShard(path, w.vocabSize, w.buf); err != nil {
		return err
	}
	w.paths = append(w.paths, path)
	w.tokens += int64(len(w.buf))
	w.buf = w.buf[:0]
	return nil
}

// Close writes the last, partly filled shard and returns the paths of all
// shards written, in order.
func (w *ShardWriter) Close() ([]string, error) {
	if len(w.buf) > 0 {
		if err := w.flush(); err != nil {
			return w.paths, err
		}
	}
	return w.paths, nil
}

// Tokens returns how many ids the shards written so far hold.
func (w *ShardWriter) Tokens() int64 { return w.tokens }
