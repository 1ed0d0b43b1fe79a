package mlx

import (
	"bufio"
	le "encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
)

// GGMLType is the element type of a GGUF tensor, numbered as llama.cpp's
// ggml_type.
type GGMLType uint32

// The GGML types that GGUF files commonly hold.
const (
	GGMLF32  GGMLType = 0
	GGMLF16  GGMLType = 1
	GGMLQ4_0 GGMLType = 2
	GGMLQ4_1 GGMLType = 3
	GGMLQ5_0 GGMLType = 6
	GGMLQ5_1 GGMLType = 7
	GGMLQ8_0 GGMLType = 8
	GGMLQ2_K GGMLType = 10
	GGMLQ3_K GGMLType = 11
	GGMLQ4_K GGMLType = 12
	GGMLQ5_K GGMLType = 13
	GGMLQ6_K GGMLType = 14
	GGMLQ8_K GGMLType = 15
	GGMLI8   GGMLType = 24
	GGMLI16  GGMLType = 25
	GGMLI32  GGMLType = 26
	GGMLBF16 GGMLType = 30
)

// ggmlTypeInfo is a type's name and storage: blockBytes bytes hold
// blockSize consecutive elements of a row.
type ggmlTypeInfo struct {
	name                  string
	blockSize, blockBytes int64
}

// ggmlTypes are the GGML types by number, as ggml.c sizes them (types
// 4 and 5 were removed from ggml, 31–33 are unused).
var ggmlTypes = map[GGMLType]ggmlTypeInfo{
	0: {"F32", 1, 4}, 1: {"F16", 1, 2}, 2: {"Q4_0", 32, 18}, 3: {"Q4_1", 32, 20},
	6: {"Q5_0", 32, 22}, 7: {"Q5_1", 32, 24}, 8: {"Q8_0", 32, 34}, 9: {"Q8_1", 32, 36},
	10: {"Q2_K", 256, 84}, 11: {"Q3_K", 256, 110}, 12: {"Q4_K", 256, 144}, 13: {"Q5_K", 256, 176},
	14: {"Q6_K", 256, 210}, 15: {"Q8_K", 256, 292}, 16: {"IQ2_XXS", 256, 66}, 17: {"IQ2_XS", 256, 74},
	18: {"IQ3_XXS", 256, 98}, 19: {"IQ1_S", 256, 50}, 20: {"IQ4_NL", 32, 18}, 21: {"IQ3_S", 256, 110},
	22: {"IQ2_S", 256, 82}, 23: {"IQ4_XS", 256, 136}, 24: {"I8", 1, 1}, 25: {"I16", 1, 2},
	26: {"I32", 1, 4}, 27: {"I64", 1, 8}, 28: {"F64", 1, 8}, 29: {"IQ1_M", 256, 56},
	30: {"BF16", 1, 2}, 34: {"TQ1_0", 256, 54}, 35: {"TQ2_0", 256, 66}, 39: {"MXFP4", 32, 17},
}

// String returns the type's llama.cpp name, e.g. "Q4_1".
func (t GGMLType) String() string {
	if i, ok := ggmlTypes[t]; ok {
		return i.name
	}
	return fmt.Sprintf("type %d", uint32(t))
}

// GGUFTensorInfo is one tensor as a GGUF header records it.
type GGUFTensorInfo struct {
	Name  string
	Type  GGMLType
	Shape []int // row-major, as MLX and numpy order it: GGUF's dimensions reversed
	// Offset is where the tensor's bytes start in the file, Size how many
	// there are.
	Offset, Size int64
}

// GGUFHeader is the structure of a GGUF file: its version and tensors.
type GGUFHeader struct {
	Version uint32
	Tensors []GGUFTensorInfo
	// Keys are the metadata keys with their value types: "uint32",
	// "string", "array of float32", …
	Keys map[string]string
	// Strings and Numbers are the metadata values that are one string or
	// one number (bools as 0 or 1), by key: what a model's configuration
	// is made of, read without loading the file. LoadGGUF returns every
	// value, arrays included.
	Strings map[string]string
	Numbers map[string]float64
	// DataOffset is where the data section starts, Alignment the
	// alignment of it and of every tensor in it.
	DataOffset, Alignment int64
}

// GGUF metadata value types, numbered as the GGUF specification does.
const (
	ggufUint8 = iota
	ggufInt8
	ggufUint16
	ggufInt16
	ggufUint32
	ggufInt32
	ggufFloat32
	ggufBool
	ggufString
	ggufArray
	ggufUint64
	ggufInt64
	ggufFloat64
)

var ggufValueNames = []string{"uint8", "int8", "uint16", "int16", "uint32", "int32", "float32", "bool", "string",
	"array", "uint64", "int64", "float64"}

func ggufValueName(typ uint32) string {
	if int(typ) < len(ggufValueNames) {
		return ggufValueNames[typ]
	}
	return fmt.Sprintf("value type %d", typ)
}

var ggufValueSize = map[uint32]int64{
	ggufUint8: 1, ggufInt8: 1, ggufBool: 1, ggufUint16: 2, ggufInt16: 2, ggufUint32: 4, ggufInt32: 4,
	ggufFloat32: 4, ggufUint64: 8, ggufInt64: 8, ggufFloat64: 8,
}

// maxGGUFDims is GGML_MAX_DIMS: the most dimensions a tensor has.
const maxGGUFDims = 4

// ReadGGUFHeader reads and checks the structure of the GGUF file path:
// magic, version 2 or 3 (little-endian), every metadata key and value
// (strings, numbers, one level of arrays) inside the file, no key twice,
// a non-zero general.alignment, and every tensor with 1 to 4 dimensions,
// a known type whose blocks tile its rows, an aligned offset and all its
// bytes inside the file. MLX's own reader trusts all of this, so a
// truncated or corrupt file is rejected here with an error rather than
// read past its end.
func ReadGGUFHeader(path string) (*GGUFHeader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("gguf: %s is not a regular file", path)
	}
	h, err := readGGUFHeader(bufio.NewReaderSize(f, 1<<20), st.Size())
	if err != nil {
		return nil, fmt.Errorf("gguf: %s: %w", path, err)
	}
	return h, nil
}

// ggufReader reads little-endian fields, counting bytes against the
// file's size so that no length read from the file makes it allocate or
// skip past the end.
type ggufReader struct {
	r         *bufio.Reader
	off, size int64
	what      string // the field being read, for errors
}

var errGGUFTruncated = errors.New("the file ends early")

func (g *ggufReader) need(n int64) error {
	if n < 0 || n > g.size-g.off {
		return fmt.Errorf("%s needs %d bytes at offset %d, the file has %d: %w", g.what, n, g.off, g.size, errGGUFTruncated)
	}
	return nil
}

func (g *ggufReader) bytes(n int64) ([]byte, error) {
	if err := g.need(n); err != nil {
		return nil, err
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(g.r, b); err != nil {
		return nil, fmt.Errorf("%s: %w", g.what, err)
	}
	g.off += n
	return b, nil
}

func (g *ggufReader) skip(n int64) error {
	if err := g.need(n); err != nil {
		return err
	}
	if _, err := g.r.Discard(int(n)); err != nil {
		return fmt.Errorf("%s: %w", g.what, err)
	}
	g.off += n
	return nil
}

func (g *ggufReader) u32() (uint32, error) {
	b, err := g.bytes(4)
	if err != nil {
		return 0, err
	}
	return le.LittleEndian.Uint32(b), nil
}

func (g *ggufReader) u64() (uint64, error) {
	b, err := g.bytes(8)
	if err != nil {
		return 0, err
	}
	return le.LittleEndian.Uint64(b), nil
}

// str reads a GGUF string: a uint64 length, then that many bytes.
func (g *ggufReader) str() (string, error) {
	n, err := g.u64()
	if err != nil {
		return "", err
	}
	if n > math.MaxInt32 {
		return "", fmt.Errorf("%s has length %d, more than %d", g.what, n, math.MaxInt32)
	}
	b, err := g.bytes(int64(n))
	return string(b), err
}

func readGGUFHeader(r *bufio.Reader, size int64) (*GGUFHeader, error) {
	g := &ggufReader{r: r, size: size, what: "the header"}
	magic, err := g.bytes(4)
	if err != nil {
		return nil, fmt.Errorf("not a GGUF file: %w", err)
	}
	if string(magic) != "GGUF" {
		return nil, fmt.Errorf("not a GGUF file: it starts with %q, want \"GGUF\"", magic)
	}
	version, err := g.u32()
	if err != nil {
		return nil, err
	}
	switch {
	case version == 2 || version == 3:
	case version == 0x02000000 || version == 0x03000000:
		return nil, fmt.Errorf("GGUF version %d is big-endian; want a little-endian file", version>>24)
	default:
		return nil, fmt.Errorf("GGUF version %d is not supported; want 2 or 3", version)
	}
	nTensors, err := g.u64()
	if err != nil {
		return nil, err
	}
	nKV, err := g.u64()
	if err != nil {
		return nil, err
	}
	// A key-value pair takes at least 13 bytes, a tensor record 24: counts
	// the file cannot hold are corrupt, and are not allocated for.
	if nKV > uint64(size/13) {
		return nil, fmt.Errorf("%d metadata values cannot fit a file of %d bytes", nKV, size)
	}
	if nTensors > uint64(size/24) {
		return nil, fmt.Errorf("%d tensors cannot fit a file of %d bytes", nTensors, size)
	}
	h := &GGUFHeader{Version: version, Alignment: 32, Keys: make(map[string]string, nKV),
		Strings: map[string]string{}, Numbers: map[string]float64{}}
	for i := range nKV {
		g.what = fmt.Sprintf("metadata key %d", i)
		key, err := g.str()
		if err != nil {
			return nil, err
		}
		if _, dup := h.Keys[key]; dup {
			return nil, fmt.Errorf("metadata key %q appears twice", key)
		}
		g.what = fmt.Sprintf("metadata %q", key)
		typ, err := g.u32()
		if err != nil {
			return nil, err
		}
		h.Keys[key] = ggufValueName(typ)
		if typ == ggufArray {
			h.Keys[key], err = g.arrayType()
			if err != nil {
				return nil, err
			}
		}
		if key == "general.alignment" {
			if typ != ggufUint32 {
				return nil, fmt.Errorf("general.alignment has value type %d, want uint32 (%d)", typ, ggufUint32)
			}
			a, err := g.u32()
			if err != nil {
				return nil, err
			}
			if a == 0 || a%8 != 0 {
				return nil, fmt.Errorf("general.alignment = %d, want a non-zero multiple of 8", a)
			}
			h.Alignment = int64(a)
			continue
		}
		if typ == ggufString {
			if h.Strings[key], err = g.str(); err != nil {
				return nil, err
			}
			continue
		}
		if n, ok := ggufValueSize[typ]; ok {
			b, err := g.bytes(n)
			if err != nil {
				return nil, err
			}
			h.Numbers[key] = ggufNumber(typ, b)
			continue
		}
		if err := g.skipValue(typ); err != nil {
			return nil, err
		}
	}
	names := make(map[string]bool, nTensors)
	for i := range nTensors {
		g.what = fmt.Sprintf("tensor record %d", i)
		t, err := g.tensorInfo()
		if err != nil {
			return nil, err
		}
		if names[t.Name] {
			return nil, fmt.Errorf("tensor %q appears twice", t.Name)
		}
		names[t.Name] = true
		h.Tensors = append(h.Tensors, t)
	}
	h.DataOffset = g.off + (h.Alignment-g.off%h.Alignment)%h.Alignment
	for i := range h.Tensors {
		t := &h.Tensors[i]
		rel := t.Offset
		if rel%h.Alignment != 0 {
			return nil, fmt.Errorf("tensor %q has offset %d, not a multiple of the alignment %d", t.Name, rel, h.Alignment)
		}
		if rel > size || t.Size > size-h.DataOffset-rel {
			return nil, fmt.Errorf("tensor %q (%s%v) needs bytes [%d,%d) of the data section at %d, the file has %d bytes: %w",
				t.Name, t.Type, t.Shape, rel, rel+t.Size, h.DataOffset, size, errGGUFTruncated)
		}
		t.Offset = h.DataOffset + rel
	}
	return h, nil
}

// ggufNumber decodes a scalar metadata value of type typ.
func ggufNumber(typ uint32, b []byte) float64 {
	switch typ {
	case ggufUint8, ggufBool:
		return float64(b[0])
	case ggufInt8:
		return float64(int8(b[0]))
	case ggufUint16:
		return float64(le.LittleEndian.Uint16(b))
	case ggufInt16:
		return float64(int16(le.LittleEndian.Uint16(b)))
	case ggufUint32:
		return float64(le.LittleEndian.Uint32(b))
	case ggufInt32:
		return float64(int32(le.LittleEndian.Uint32(b)))
	case ggufFloat32:
		return float64(math.Float32frombits(le.LittleEndian.Uint32(b)))
	case ggufUint64:
		return float64(le.LittleEndian.Uint64(b))
	case ggufInt64:
		return float64(int64(le.LittleEndian.Uint64(b)))
	}
	return math.Float64frombits(le.LittleEndian.Uint64(b))
}

// arrayType names the type of the array value that starts at the
// reader's position, without consuming it.
func (g *ggufReader) arrayType() (string, error) {
	b, err := g.r.Peek(4)
	if err != nil || g.need(4) != nil {
		return "", fmt.Errorf("%s: %w", g.what, errGGUFTruncated)
	}
	return "array of " + ggufValueName(le.LittleEndian.Uint32(b)), nil
}

// skipValue checks and skips a metadata value of type typ; arrays hold
// scalars or strings, not arrays.
func (g *ggufReader) skipValue(typ uint32) error {
	if n, ok := ggufValueSize[typ]; ok {
		return g.skip(n)
	}
	switch typ {
	case ggufString:
		n, err := g.u64()
		if err != nil {
			return err
		}
		if n > math.MaxInt32 {
			return fmt.Errorf("%s: string of length %d, more than %d", g.what, n, math.MaxInt32)
		}
		return g.skip(int64(n))
	case ggufArray:
		et, err := g.u32()
		if err != nil {
			return err
		}
		n, err := g.u64()
		if err != nil {
			return err
		}
		if n > math.MaxInt32 {
			return fmt.Errorf("%s: array of %d values, more than %d", g.what, n, math.MaxInt32)
		}
		if es, ok := ggufValueSize[et]; ok {
			if int64(n) > (g.size-g.off)/es {
				return g.need(int64(n) * es)
			}
			return g.skip(int64(n) * es)
		}
		switch et {
		case ggufString:
			for range n {
				if err := g.skipValue(ggufString); err != nil {
					return err
				}
			}
			return nil
		case ggufArray:
			return fmt.Errorf("%s: an array of arrays is not supported (MLX reads one level)", g.what)
		}
		return fmt.Errorf("%s: array of unknown value type %d", g.what, et)
	}
	return fmt.Errorf("%s: unknown value type %d", g.what, typ)
}

// tensorInfo reads one tensor record: its name, dimensions (innermost
// first), type and offset in the data section.
func (g *ggufReader) tensorInfo() (GGUFTensorInfo, error) {
	var t GGUFTensorInfo
	name, err := g.str()
	if err != nil {
		return t, err
	}
	t.Name = name
	if strings.IndexByte(name, 0) >= 0 {
		return t, fmt.Errorf("tensor name %q contains a NUL byte", name)
	}
	g.what = fmt.Sprintf("tensor %q", name)
	nd, err := g.u32()
	if err != nil {
		return t, err
	}
	if nd < 1 || nd > maxGGUFDims {
		return t, fmt.Errorf("tensor %q has %d dimensions, want 1 to %d", name, nd, maxGGUFDims)
	}
	dims := make([]int64, nd)
	count := int64(1)
	for i := range dims {
		d, err := g.u64()
		if err != nil {
			return t, err
		}
		if d < 1 || d > math.MaxInt32 || count > (1<<50)/int64(d) {
			return t, fmt.Errorf("tensor %q has dimension %d = %d; want 1 to %d, with fewer than 2^50 elements in all", name, i, d, math.MaxInt32)
		}
		dims[i] = int64(d)
		count *= int64(d)
	}
	typ, err := g.u32()
	if err != nil {
		return t, err
	}
	t.Type = GGMLType(typ)
	info, ok := ggmlTypes[t.Type]
	if !ok {
		return t, fmt.Errorf("tensor %q has unknown type %d", name, typ)
	}
	if dims[0]%info.blockSize != 0 {
		return t, fmt.Errorf("tensor %q is %s, whose blocks of %d values do not tile its rows of %d", name, t.Type, info.blockSize, dims[0])
	}
	t.Size = count / info.blockSize * info.blockBytes
	off, err := g.u64()
	if err != nil {
		return t, err
	}
	if off > math.MaxInt64/2 {
		return t, fmt.Errorf("tensor %q has offset %d beyond any file", name, off)
	}
	t.Offset = int64(off)
	t.Shape = make([]int, nd)
	for i, d := range dims {
		t.Shape[len(dims)-1-i] = int(d)
	}
	return t, nil
}
