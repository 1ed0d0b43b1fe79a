package data

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
)

// Token shards are the .bin format of llm.c and modded-nanogpt, so that
// the token streams those tools prepare (FineWeb, TinyStories, ...) train
// here unchanged and the other way round. All integers are little-endian.
//
//	offset size  field
//	     0    4  magic: 20240520 (uint16 tokens) or 20240801 (uint32 tokens)
//	     4    4  version: 1 with magic 20240520, 7 with magic 20240801
//	     8    4  token count, a non-negative int32
//	    12 1012  unused (llm.c writes zeros)
//	  1024       payload: count tokens of 2 or 4 bytes each
//
// The pairs are llm.c's dev/data/data_common.py HEADERS_INFO: "gpt-2"
// (20240520, 1, uint16) and "llama-3" (20240801, 7, uint32). Writers here
// use the uint16 variant for vocabularies of at most 65,536 ids and the
// uint32 one above. The format has no checksum and does not say which
// tokenizer made it, so OpenShards checks every id against the vocabulary
// the caller expects instead.
const (
	shardHeaderInts = 256
	shardHeaderSize = 4 * shardHeaderInts
	shardMagic16    = 20240520
	shardVersion16  = 1
	shardMagic32    = 20240801
	shardVersion32  = 7
	// MaxShardTokens is the most tokens one shard can hold: the header's
	// count is an int32.
	MaxShardTokens = 1<<31 - 1
)

// shardHeader returns the header of a shard of count tokens of width
// bytes.
func shardHeader(width, count int) []byte {
	h := make([]byte, shardHeaderSize)
	magic, version := uint32(shardMagic16), uint32(shardVersion16)
	if width == 4 {
		magic, version = shardMagic32, shardVersion32
	}
	binary.LittleEndian.PutUint32(h[0:], magic)
	binary.LittleEndian.PutUint32(h[4:], version)
	binary.LittleEndian.PutUint32(h[8:], uint32(count))
	return h
}

// parseShardHeader validates the header at the start of data, a whole
// shard, against its size, and returns the token width and count.
func parseShardHeader(data []byte) (width, count int, err error) {
	if len(data) < shardHeaderSize {
		return 0, 0, fmt.Errorf("%d bytes, shorter than the %d-byte shard header (truncated?)", len(data), shardHeaderSize)
	}
	magic := binary.LittleEndian.Uint32(data[0:])
	version := binary.LittleEndian.Uint32(data[4:])
	switch {
	case magic == shardMagic16 && version == shardVersion16:
		width = 2
	case magic == shardMagic32 && version == shardVersion32:
		width = 4
	case magic == shardMagic16 || magic == shardMagic32:
		return 0, 0, fmt.Errorf("shard magic %d with version %d, want version %d for magic %d or %d for magic %d",
			magic, version, shardVersion16, shardMagic16, shardVersion32, shardMagic32)
	default:
		return 0, 0, fmt.Errorf("magic %d, want %d (uint16 tokens) or %d (uint32 tokens): not an llm.c token shard",
			magic, shardMagic16, shardMagic32)
	}
	n := int32(binary.LittleEndian.Uint32(data[8:]))
	if n < 0 {
		return 0, 0, fmt.Errorf("header token count %d, want a non-negative count", n)
	}
	payload := len(data) - shardHeaderSize
	if payload != int(n)*width {
		return 0, 0, fmt.Errorf("header says %d tokens of %d bytes (%d bytes), but the file has %d payload bytes (truncated or corrupt)",
			n, width, int(n)*width, payload)
	}
	return width, int(n), nil
}

// OpenShard memory-maps the token shard at path and validates its header
// against the file's size; it does not read the tokens (OpenShards checks
// them against a vocabulary). The caller must Close the result.
func OpenShard(path string) (*Tokens, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("token shard: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("token shard: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("token shard %q: is a %s, want a regular file", path, st.Mode().Type())
	}
	size := st.Size()
	if size < shardHeaderSize {
		return nil, fmt.Errorf("token shard %q: %d bytes, shorter than the %d-byte header (truncated?)", path, size, shardHeaderSize)
	}
	if int64(int(size)) != size {
		return nil, fmt.Errorf("token shard %q: %d bytes, too large to map on this platform", path, size)
	}
	data, unmap, err := mapFile(f, int(size))
	if err != nil {
		return nil, fmt.Errorf("token shard %q: mapping %d bytes: %w", path, size, err)
	}
	width, count, err := parseShardHeader(data)
	if err != nil {
		unmap()
		return nil, fmt.Errorf("token shard %q: %w", path, err)
	}
	return &Tokens{
		info:    TokenFileInfo{Width: width, Count: count},
		path:    path,
		payload: data[shardHeaderSize:],
		n:       count,
		release: unmap,
	}, nil
}

// WriteShard writes ids as a token shard at path, atomically: readers see
// either the old file or the complete new one. Tokens are uint16 when
// vocabSize is at most 65,536 and uint32 otherwise; every id must be in
// [0, vocabSize).
func WriteShard(path string, vocabSize int, ids []int32) error {
	if vocabSize < 1 || int64(vocabSize) > 1<<32 {
		return fmt.Errorf("token shard %q: vocabulary size %d, want 1 to %d", path, vocabSize, int64(1)<<32)
	}
	if len(ids) > MaxShardTokens {
		return fmt.Errorf("token shard %q: %d tokens, more than the format's %d", path, len(ids), MaxShardTokens)
	}
	width := tokenWidth(vocabSize)
	buf := make([]byte, shardHeaderSize+width*len(ids))
	copy(buf, shardHeader(width, len(ids)))
	payload := buf[shardHeaderSize:]
	for i, id := range ids {
		if id < 0 || int64(id) >= int64(vocabSize) {
			return fmt.Errorf("token shard %q: id %d at index %d is outside the vocabulary [0,%d)", path, id, i, vocabSize)
		}
		if width == 2 {
			binary.LittleEndian.PutUint16(payload[2*i:], uint16(id))
		} else {
			binary.LittleEndian.PutUint32(payload[4*i:], uint32(id))
		}
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("token shard %q: %w", path, err)
	}
	_, err = f.Write(buf)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("token shard %q: %w", path, err)
	}
	syncDir(filepath.Dir(path))
	return nil
}
