package data

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
)

// Token file layout. All integers are little-endian.
//
//	offset size  field
//	     0    8  magic "PTLMTOK1"
//	     8    4  format version (1)
//	    12    4  token width in bytes: 2 (uint16) if VocabSize <= 65536, else 4 (uint32)
//	    16    8  token count
//	    24    4  vocabulary size
//	    28    4  CRC-32C of the payload
//	    32   24  tokenizer name, ASCII, NUL-padded
//	    56   32  corpus hash (raw SHA-256)
//	    88   36  reserved, zero
//	   124    4  CRC-32C of bytes 0..124
//	   128       payload: count tokens of width bytes each
//
// The header is 128 bytes so the payload is aligned for any token width.
const (
	tokenFileMagic      = "PTLMTOK1"
	tokenFileVersion    = 1
	tokenHeaderSize     = 128
	maxTokenizerNameLen = 24
	corpusHashLen       = 32
)

// castagnoli is the CRC-32C table; most CPUs compute it in hardware.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// TokenFileMeta is what a token file records about where its tokens came
// from.
type TokenFileMeta struct {
	// Tokenizer is the tokenizer's Name: 1 to 24 characters from
	// [a-z0-9._-].
	Tokenizer string
	// VocabSize bounds the ids: every token is in [0, VocabSize).
	VocabSize int
	// CorpusHash is the hex SHA-256 Corpus.Hash of the tokenized corpus.
	CorpusHash string
}

// TokenFileInfo describes a validated token file.
type TokenFileInfo struct {
	TokenFileMeta
	// Width is the size of one token on disk: 2 or 4 bytes.
	Width int
	// Count is the number of tokens.
	Count int
	// Checksum is the CRC-32C of the payload.
	Checksum uint32
}

// tokenWidth returns the bytes per token for a vocabulary of vocabSize ids.
func tokenWidth(vocabSize int) int {
	if vocabSize <= 1<<16 {
		return 2
	}
	return 4
}

// validate checks m against the limits of the file format.
func (m TokenFileMeta) validate() error {
	if err := validateTokenizerName(m.Tokenizer); err != nil {
		return err
	}
	if m.VocabSize < 1 || int64(m.VocabSize) > 1<<31 {
		return fmt.Errorf("vocabulary size %d, want 1 to %d", m.VocabSize, int64(1)<<31)
	}
	if b, err := hex.DecodeString(m.CorpusHash); err != nil || len(b) != corpusHashLen {
		return fmt.Errorf("corpus hash %q, want %d hex digits", m.CorpusHash, 2*corpusHashLen)
	}
	return nil
}

// validateTokenizerName checks that name fits a token file header and a
// cache file name.
func validateTokenizerName(name string) error {
	if name == "" || len(name) > maxTokenizerNameLen {
		return fmt.Errorf("tokenizer name %q, want 1 to %d characters", name, maxTokenizerNameLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("tokenizer name %q has %q at byte %d, want only [a-z0-9._-]", name, c, i)
		}
	}
	return nil
}

// encodeHeader returns the 128-byte header for info.
func encodeHeader(info TokenFileInfo) []byte {
	h := make([]byte, tokenHeaderSize)
	copy(h[0:8], tokenFileMagic)
	binary.LittleEndian.PutUint32(h[8:], tokenFileVersion)
	binary.LittleEndian.PutUint32(h[12:], uint32(info.Width))
	binary.LittleEndian.PutUint64(h[16:], uint64(info.Count))
	binary.LittleEndian.PutUint32(h[24:], uint32(info.VocabSize))
	binary.LittleEndian.PutUint32(h[28:], info.Checksum)
	copy(h[32:56], info.Tokenizer)
	hash, _ := hex.DecodeString(info.CorpusHash) // validated by the writer
	copy(h[56:88], hash)
	binary.LittleEndian.PutUint32(h[124:], crc32.Checksum(h[:124], castagnoli))
	return h
}

// parseHeader validates the header at the start of data, a whole token
// file, against the file's size, without looking at the payload.
func parseHeader(data []byte) (TokenFileInfo, error) {
	var info TokenFileInfo
	if len(data) < tokenHeaderSize {
		return info, fmt.Errorf("%d bytes, shorter than the %d-byte header (truncated?)", len(data), tokenHeaderSize)
	}
	h := data[:tokenHeaderSize]
	if string(h[0:8]) != tokenFileMagic {
		return info, fmt.Errorf("magic %q, want %q (not a token file)", h[0:8], tokenFileMagic)
	}
	if v := binary.LittleEndian.Uint32(h[8:]); v != tokenFileVersion {
		return info, fmt.Errorf("format version %d, want %d", v, tokenFileVersion)
	}
	if got, want := crc32.Checksum(h[:124], castagnoli), binary.LittleEndian.Uint32(h[124:]); got != want {
		return info, fmt.Errorf("header checksum %08x, want %08x (corrupt header)", got, want)
	}
	name, rest, _ := bytes.Cut(h[32:56], []byte{0})
	if len(bytes.Trim(rest, "\x00")) != 0 {
		return info, fmt.Errorf("tokenizer name field %q has bytes after its NUL padding", h[32:56])
	}
	if i := bytes.IndexFunc(h[88:124], func(r rune) bool { return r != 0 }); i >= 0 {
		return info, fmt.Errorf("reserved header byte %d is %#x, want 0", 88+i, h[88+i])
	}
	info.Tokenizer = string(name)
	info.VocabSize = int(binary.LittleEndian.Uint32(h[24:]))
	info.CorpusHash = hex.EncodeToString(h[56:88])
	if err := info.validate(); err != nil {
		return info, err
	}
	width := binary.LittleEndian.Uint32(h[12:])
	if want := tokenWidth(info.VocabSize); width != uint32(want) {
		return info, fmt.Errorf("token width %d bytes, want %d for vocabulary size %d", width, want, info.VocabSize)
	}
	info.Width = int(width)
	count := binary.LittleEndian.Uint64(h[16:])
	payload := uint64(len(data) - tokenHeaderSize)
	if count > payload/uint64(width) || count*uint64(width) != payload {
		return info, fmt.Errorf("header says %d tokens of %d bytes, but the file has %d payload bytes (truncated or corrupt)", count, width, payload)
	}
	info.Count = int(count)
	info.Checksum = binary.LittleEndian.Uint32(h[28:])
	return info, nil
}

// checkPayload verifies the payload checksum and that every token is inside
// the vocabulary.
func checkPayload(info TokenFileInfo, payload []byte) error {
	if got := crc32.Checksum(payload, castagnoli); got != info.Checksum {
		return fmt.Errorf("payload checksum %08x, want %08x from the header (corrupt payload)", got, info.Checksum)
	}
	vocab := uint32(info.VocabSize)
	if info.Width == 2 {
		for i := 0; i+1 < len(payload); i += 2 {
			if id := uint32(binary.LittleEndian.Uint16(payload[i:])); id >= vocab {
				return fmt.Errorf("token %d at index %d is outside the vocabulary [0,%d)", id, i/2, vocab)
			}
		}
		return nil
	}
	for i := 0; i+3 < len(payload); i += 4 {
		if id := binary.LittleEndian.Uint32(payload[i:]); id >= vocab {
			return fmt.Errorf("token %d at index %d is outside the vocabulary [0,%d)", id, i/4, vocab)
		}
	}
	return nil
}

// ReadTokenFile opens the token file at path, validates its header,
// size, checksum and token range, and memory-maps it where the platform
// allows. It returns an error, never panics, on a missing, truncated or
// corrupt file. The caller must Close the result.
//
// The mapping assumes the file is not truncated while open; token files
// are only ever replaced by rename, which leaves open mappings intact.
func ReadTokenFile(path string) (*Tokens, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("token file %q: is a %s, want a regular file", path, st.Mode().Type())
	}
	size := st.Size()
	if size < tokenHeaderSize {
		return nil, fmt.Errorf("token file %q: %d bytes, shorter than the %d-byte header (truncated?)", path, size, tokenHeaderSize)
	}
	if int64(int(size)) != size {
		return nil, fmt.Errorf("token file %q: %d bytes, too large to map on this platform", path, size)
	}
	data, unmap, err := mapFile(f, int(size))
	if err != nil {
		return nil, fmt.Errorf("token file %q: mapping %d bytes: %w", path, size, err)
	}
	info, err := parseHeader(data)
	if err == nil {
		err = checkPayload(info, data[tokenHeaderSize:])
	}
	if err != nil {
		unmap()
		return nil, fmt.Errorf("token file %q: %w", path, err)
	}
	return &Tokens{
		info:    info,
		path:    path,
		payload: data[tokenHeaderSize:],
		n:       info.Count,
		release: unmap,
	}, nil
}

// WriteTokenFile writes ids as a token file at path, atomically: readers
// see either the old file or the complete new one.
func WriteTokenFile(path string, meta TokenFileMeta, ids []int32) error {
	w, err := createTokenFile(path, meta)
	if err != nil {
		return err
	}
	if err := w.write(ids); err != nil {
		w.abort()
		return err
	}
	return w.commit()
}

// tokenFileWriter streams tokens into a temporary file next to its final
// path and renames it into place on commit.
type tokenFileWriter struct {
	path  string
	meta  TokenFileMeta
	width int
	f     *os.File
	bw    *bufio.Writer
	crc   uint32
	count int
	buf   []byte
}

// createTokenFile starts writing a token file for meta at path.
func createTokenFile(path string, meta TokenFileMeta) (*tokenFileWriter, error) {
	if err := meta.validate(); err != nil {
		return nil, fmt.Errorf("token file %q: %w", path, err)
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("token file %q: %w", path, err)
	}
	w := &tokenFileWriter{
		path:  path,
		meta:  meta,
		width: tokenWidth(meta.VocabSize),
		f:     f,
		bw:    bufio.NewWriterSize(f, 1<<20),
	}
	if _, err := w.bw.Write(make([]byte, tokenHeaderSize)); err != nil {
		w.abort()
		return nil, fmt.Errorf("token file %q: %w", path, err)
	}
	return w, nil
}

// write appends ids, which must lie in [0, VocabSize).
func (w *tokenFileWriter) write(ids []int32) error {
	need := len(ids) * w.width
	if cap(w.buf) < need {
		w.buf = make([]byte, need)
	}
	buf := w.buf[:need]
	for i, id := range ids {
		if id < 0 || int(id) >= w.meta.VocabSize {
			return fmt.Errorf("token file %q: tokenizer %q produced id %d, outside its vocabulary [0,%d)",
				w.path, w.meta.Tokenizer, id, w.meta.VocabSize)
		}
		if w.width == 2 {
			binary.LittleEndian.PutUint16(buf[2*i:], uint16(id))
		} else {
			binary.LittleEndian.PutUint32(buf[4*i:], uint32(id))
		}
	}
	w.crc = crc32.Update(w.crc, castagnoli, buf)
	w.count += len(ids)
	if _, err := w.bw.Write(buf); err != nil {
		return fmt.Errorf("token file %q: %w", w.path, err)
	}
	return nil
}

// commit writes the header, syncs the file and renames it into place.
func (w *tokenFileWriter) commit() error {
	err := w.bw.Flush()
	if err == nil {
		header := encodeHeader(TokenFileInfo{TokenFileMeta: w.meta, Width: w.width, Count: w.count, Checksum: w.crc})
		_, err = w.f.WriteAt(header, 0)
	}
	if err == nil {
		err = w.f.Sync()
	}
	if err == nil {
		err = w.f.Close()
	}
	if err == nil {
		err = os.Rename(w.f.Name(), w.path)
	}
	if err != nil {
		w.abort()
		return fmt.Errorf("token file %q: %w", w.path, err)
	}
	syncDir(filepath.Dir(w.path))
	return nil
}

// abort discards the temporary file.
func (w *tokenFileWriter) abort() {
	w.f.Close()
	os.Remove(w.f.Name())
}

// syncDir makes a rename in dir durable. It is best effort: some platforms
// and file systems cannot sync directories, and the rename has happened
// either way.
func syncDir(dir string) {
	d, err := os.Open(dir)
	if err != nil {
		return
	}
	d.Sync()
	d.Close()
}
