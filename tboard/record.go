package tboard

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// castagnoli is the CRC-32C table TFRecord checksums use.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// maskDelta is added to a rotated CRC to mask it (TFRecord's kMaskDelta).
const maskDelta = 0xa282ead8

// MaskedCRC is TFRecord's checksum of b: CRC-32C, rotated right by 15
// bits, plus 0xa282ead8. Masking keeps a CRC stored inside checksummed
// data from making the outer checksum degenerate.
func MaskedCRC(b []byte) uint32 {
	c := crc32.Checksum(b, castagnoli)
	return (c>>15 | c<<17) + maskDelta
}

// WriteRecord frames data as one TFRecord on w: its length as a
// little-endian uint64, the masked CRC of those 8 bytes, data, and the
// masked CRC of data.
func WriteRecord(w io.Writer, data []byte) error {
	buf := make([]byte, 12, 12+len(data)+4)
	binary.LittleEndian.PutUint64(buf, uint64(len(data)))
	binary.LittleEndian.PutUint32(buf[8:], MaskedCRC(buf[:8]))
	buf = append(buf, data...)
	buf = binary.LittleEndian.AppendUint32(buf, MaskedCRC(data))
	_, err := w.Write(buf)
	return err
}

// maxRecord bounds the length ReadRecord accepts, so a corrupt length
// field fails as such rather than as an enormous allocation.
const maxRecord = 1 << 30

// ErrCorrupt is returned (wrapped) by ReadRecord for a record whose
// checksums do not match or that ends early.
var ErrCorrupt = errors.New("tboard: corrupt record")

// ReadRecord reads one TFRecord from r and returns its data after checking
// both checksums. At the end of r it returns io.EOF; a record cut short or
// failing a checksum gives an error wrapping ErrCorrupt.
func ReadRecord(r io.Reader) ([]byte, error) {
	var head [12]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		if err == io.EOF {
			return nil, io.EOF
		}
		return nil, fmt.Errorf("%w: header: %v", ErrCorrupt, err)
	}
	if got, want := binary.LittleEndian.Uint32(head[8:]), MaskedCRC(head[:8]); got != want {
		return nil, fmt.Errorf("%w: length checksum %#08x, want %#08x", ErrCorrupt, got, want)
	}
	n := binary.LittleEndian.Uint64(head[:8])
	if n > maxRecord {
		return nil, fmt.Errorf("%w: length %d, want at most %d", ErrCorrupt, n, maxRecord)
	}
	data := make([]byte, n+4)
	if _, err := io.ReadFull(r, data); err != nil {
		return nil, fmt.Errorf("%w: %d-byte record: %v", ErrCorrupt, n, err)
	}
	if got, want := binary.LittleEndian.Uint32(data[n:]), MaskedCRC(data[:n]); got != want {
		return nil, fmt.Errorf("%w: data checksum %#08x, want %#08x", ErrCorrupt, got, want)
	}
	return data[:n], nil
}
