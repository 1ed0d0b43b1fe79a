package mlx

/*
#include <stdlib.h>
#include "bridge_gguf.h"
*/
import "C"

import (
	le "encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"unsafe"
)

// GGUFKind is the kind of a GGUF metadata value as MLX returns it.
type GGUFKind int

// Kinds of GGUF metadata values.
const (
	GGUFNone    GGUFKind = C.PTLM_GGUF_NONE
	GGUFNumbers GGUFKind = C.PTLM_GGUF_ARRAY   // a number or an array of numbers (or bools)
	GGUFString  GGUFKind = C.PTLM_GGUF_STRING  // one string
	GGUFStrings GGUFKind = C.PTLM_GGUF_STRINGS // an array of strings
)

// GGUFValue is one metadata value of a GGUF file. Numbers keep MLX's
// dtype; Scalar tells a single number from an array of them. Ints holds
// integer and bool values exactly (uint64 values as their int64 bits),
// Floats every number as float64. MLX reads float64 values (rare in GGUF
// files) as float32.
type GGUFValue struct {
	Kind    GGUFKind
	Dtype   Dtype
	Scalar  bool
	Ints    []int64
	Floats  []float64
	String  string
	Strings []string
}

// GGUFTensor is one tensor of a GGUF file as MLX loads it.
//
// A file with a tensor of a type MLX cannot read exactly (Q5_0, Q5_1 and
// the K-quants) is read without MLX: its float and integer tensors are
// Data, and every quantized tensor is Raw, its GGML blocks as the file
// stores them, with Data, Scales and Biases nil and Bits 0.
//
// F32, F16, BF16, I8, I16 and I32 tensors are Data, of Info.Shape, in the
// matching dtype. Q4_0, Q4_1 and Q8_0 tensors come as MLX's affine
// quantization with groups of 32 along the last axis: Data is uint32 of
// shape [..., cols·Bits/32] (Bits 4 or 8 per value, the first value in the
// lowest bits), Scales and Biases float16 [..., cols/32], and value i of a
// group is q_i·scale + bias (Q4_0: bias = −8·scale; Q8_0: q is the int8
// value plus 128 and bias = −128·scale; Q4_1: its scale and minimum).
type GGUFTensor struct {
	Info                 GGUFTensorInfo
	Data, Scales, Biases *Array
	Bits                 int // 4 or 8 for a quantized tensor, 0 otherwise
	// Raw holds a quantized tensor's blocks, of type Info.Type, where the
	// file was read without MLX; nil otherwise.
	Raw []byte
}

// Quantized reports whether the tensor is held as MLX's quantization.
func (t *GGUFTensor) Quantized() bool { return t.Bits != 0 }

// GGUFFile is a loaded GGUF file. Free releases its arrays.
type GGUFFile struct {
	Header   *GGUFHeader
	Tensors  map[string]*GGUFTensor
	Metadata map[string]GGUFValue
}

// Free releases every array of the file.
func (f *GGUFFile) Free() {
	for _, t := range f.Tensors {
		Free(t.Data, t.Scales, t.Biases)
	}
}

// GGUFLoadable are the tensor types MLX's reader reads exactly. MLX
// converts other types to float16 (lossy) or, for types its reader does
// not know, cannot read them at all: LoadGGUF reads a file with Q5_0,
// Q5_1 or K-quant tensors (GGUFBlockTypes) without MLX, and refuses other
// types (the I-quants, ternary and FP4 types) by name.
var GGUFLoadable = []GGMLType{GGMLF32, GGMLF16, GGMLBF16, GGMLI8, GGMLI16, GGMLI32, GGMLQ4_0, GGMLQ4_1, GGMLQ8_0}

// LoadGGUF checks the structure of the GGUF file path (ReadGGUFHeader),
// then loads its tensors and metadata with MLX (mlx::core::load_gguf) and
// evaluates them, so the file may change afterwards. A tensor type outside
// GGUFLoadable is an error that names it, and so is a float64 metadata
// value, after which MLX's reader would lose its place in the file. BF16
// tensors, which MLX reads as float16, are read from the file as they are.
// MLX's reader opens files for writing too, so a file this process may
// not write is loaded from a temporary copy.
func LoadGGUF(path string) (*GGUFFile, error) {
	h, err := ReadGGUFHeader(path)
	if err != nil {
		return nil, err
	}
	for key, typ := range h.Keys {
		if strings.Contains(typ, "float64") {
			return nil, fmt.Errorf("gguf: %s: metadata %q is %s, which MLX's GGUF reader mis-sizes (it reads float64 as float32); re-save the file with float32 values", path, key, typ)
		}
	}
	for _, t := range h.Tensors {
		if !slices.Contains(GGUFLoadable, t.Type) && !slices.Contains(GGUFBlockTypes, t.Type) {
			return nil, fmt.Errorf("gguf: %s: tensor %q is %s; readable types are %s", path, t.Name, t.Type, loadableNames())
		}
	}
	if needsHostLoad(h) {
		return loadGGUFHost(path, h)
	}
	for _, t := range h.Tensors {
		if isGGUFQuant(t.Type) && !strings.HasSuffix(t.Name, ".weight") {
			return nil, fmt.Errorf("gguf: %s: quantized tensor %q: MLX names the scales of quantized tensors after a .weight suffix, which this name lacks", path, t.Name)
		}
	}
	// gguflib, MLX's reader, opens the file for reading and writing (it
	// never writes): a file this process may not write is read from a
	// temporary copy.
	load := path
	if f, err := os.OpenFile(path, os.O_RDWR, 0); err == nil {
		f.Close()
	} else {
		tmp, err := copyToTemp(path)
		if err != nil {
			return nil, fmt.Errorf("gguf: %s is not writable, which MLX's reader needs, and copying it failed: %w", path, err)
		}
		defer os.Remove(tmp)
		if h, err = ReadGGUFHeader(tmp); err != nil {
			return nil, err
		}
		load = tmp
	}
	out := &GGUFFile{Header: h, Tensors: map[string]*GGUFTensor{}, Metadata: map[string]GGUFValue{}}
	err = Do(func() error {
		arrays, meta, err := loadGGUF(load)
		if err != nil {
			return err
		}
		var all []*Array
		for _, info := range h.Tensors {
			t := &GGUFTensor{Info: info}
			take := func(name string) *Array {
				a := arrays[name]
				delete(arrays, name)
				return a
			}
			t.Data = take(info.Name)
			switch info.Type {
			case GGMLQ4_0, GGMLQ4_1:
				t.Bits = 4
			case GGMLQ8_0:
				t.Bits = 8
			case GGMLBF16:
				t.Data.Free()
				b, err := readRange(load, info.Offset, info.Size)
				if err != nil {
					return err
				}
				t.Data = FromBytes(b, BFloat16, info.Shape...)
			}
			if t.Bits != 0 {
				prefix := strings.TrimSuffix(info.Name, ".weight")
				t.Scales, t.Biases = take(prefix+".scales"), take(prefix+".biases")
			}
			out.Tensors[info.Name] = t
			if t.Data == nil || (t.Bits != 0 && (t.Scales == nil || t.Biases == nil)) {
				return fmt.Errorf("MLX returned no arrays for tensor %q", info.Name)
			}
			all = append(all, t.Data)
			if t.Bits != 0 {
				all = append(all, t.Scales, t.Biases)
			}
		}
		for name, a := range arrays {
			a.Free()
			return fmt.Errorf("MLX returned an array %q that the header does not list", name)
		}
		if err := Eval(all...); err != nil {
			return err
		}
		for key, v := range meta {
			out.Metadata[key] = v
		}
		return nil
	})
	if err != nil {
		out.Free()
		return nil, fmt.Errorf("gguf: %s: %w", path, err)
	}
	return out, nil
}

func loadableNames() string {
	var names []string
	for _, t := range append(slices.Clone(GGUFLoadable), GGUFBlockTypes...) {
		if n := t.String(); !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	return strings.Join(names, ", ")
}

func isGGUFQuant(t GGMLType) bool { return t == GGMLQ4_0 || t == GGMLQ4_1 || t == GGMLQ8_0 }

// copyToTemp copies the file path to a new temporary file and returns its
// name.
func copyToTemp(path string) (string, error) {
	in, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer in.Close()
	out, err := os.CreateTemp("", "posttrainllm-*.gguf")
	if err != nil {
		return "", err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(out.Name())
		return "", err
	}
	return out.Name(), nil
}

// readRange reads n bytes at off of the file path.
func readRange(path string, off, n int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, n)
	if _, err := io.ReadFull(io.NewSectionReader(f, off, n), b); err != nil {
		return nil, fmt.Errorf("reading %d bytes at %d: %w", n, off, err)
	}
	return b, nil
}

// loadGGUF runs MLX's loader on the MLX thread and copies out its arrays
// and metadata, freeing the loaded file's handle before it returns.
func loadGGUF(path string) (map[string]*Array, map[string]GGUFValue, error) {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var g C.ptlm_gguf
	if _, err := call(func() C.int { return C.ptlm_load_gguf(cpath, &g) }); err != nil {
		return nil, nil, &Error{Op: "load_gguf", Operands: path, Msg: err.Error()}
	}
	defer call(func() C.int { return C.ptlm_gguf_free(g) })
	arrays := map[string]*Array{}
	fail := func(op string, err error) (map[string]*Array, map[string]GGUFValue, error) {
		for _, a := range arrays {
			a.Free()
		}
		return nil, nil, &Error{Op: op, Operands: path, Msg: err.Error()}
	}
	var n C.size_t
	if _, err := call(func() C.int { return C.ptlm_gguf_num_arrays(g, &n) }); err != nil {
		return fail("load_gguf", err)
	}
	for i := C.size_t(0); i < n; i++ {
		var name *C.char
		var h C.ptlm_array
		onThread, err := call(func() C.int { return C.ptlm_gguf_array(g, i, &name, &h) })
		if err != nil {
			return fail("load_gguf", err)
		}
		arrays[C.GoString(name)] = newArray(h, onThread)
	}
	meta := map[string]GGUFValue{}
	if _, err := call(func() C.int { return C.ptlm_gguf_num_meta(g, &n) }); err != nil {
		return fail("load_gguf", err)
	}
	for i := C.size_t(0); i < n; i++ {
		key, v, err := ggufMeta(g, i)
		if err != nil {
			return fail("load_gguf metadata", err)
		}
		meta[key] = v
	}
	return arrays, meta, nil
}

// ggufMeta copies metadata value i of g.
func ggufMeta(g C.ptlm_gguf, i C.size_t) (string, GGUFValue, error) {
	var ckey *C.char
	var kind C.int
	var h C.ptlm_array
	var n C.size_t
	onThread, err := call(func() C.int { return C.ptlm_gguf_meta(g, i, &ckey, &kind, &h, &n) })
	if err != nil {
		return "", GGUFValue{}, err
	}
	key := C.GoString(ckey)
	v := GGUFValue{Kind: GGUFKind(kind)}
	str := func(j C.size_t) (string, error) {
		var s *C.char
		var l C.size_t
		if _, err := call(func() C.int { return C.ptlm_gguf_meta_string(g, i, j, &s, &l) }); err != nil {
			return "", err
		}
		return C.GoStringN(s, C.int(l)), nil
	}
	switch v.Kind {
	case GGUFString:
		v.String, err = str(0)
	case GGUFStrings:
		v.Strings = make([]string, n)
		for j := range v.Strings {
			if v.Strings[j], err = str(C.size_t(j)); err != nil {
				break
			}
		}
	case GGUFNumbers:
		a := newArray(h, onThread)
		defer a.Free()
		v.Dtype, v.Scalar = a.Dtype(), a.Ndim() == 0
		var b []byte
		if b, err = a.Bytes(); err == nil {
			v.Ints, v.Floats, err = decodeNumbers(b, v.Dtype)
		}
	}
	if err != nil {
		return "", GGUFValue{}, fmt.Errorf("metadata %q: %w", key, err)
	}
	return key, v, nil
}

// decodeNumbers decodes the little-endian elements of a metadata array of
// dtype d. The bytes are read raw rather than converted by MLX, whose GPU
// backends have no float64.
func decodeNumbers(b []byte, d Dtype) (ints []int64, floats []float64, err error) {
	size := d.Size()
	if size == 0 || len(b)%size != 0 {
		return nil, nil, fmt.Errorf("%d bytes of %v numbers", len(b), d)
	}
	n := len(b) / size
	floats = make([]float64, n)
	if !d.IsFloat() {
		ints = make([]int64, n)
	}
	for i := range n {
		e := b[i*size : (i+1)*size]
		switch d {
		case Bool, Uint8:
			ints[i] = int64(e[0])
		case Int8:
			ints[i] = int64(int8(e[0]))
		case Uint16:
			ints[i] = int64(le.LittleEndian.Uint16(e))
		case Int16:
			ints[i] = int64(int16(le.LittleEndian.Uint16(e)))
		case Uint32:
			ints[i] = int64(le.LittleEndian.Uint32(e))
		case Int32:
			ints[i] = int64(int32(le.LittleEndian.Uint32(e)))
		case Uint64, Int64:
			ints[i] = int64(le.LittleEndian.Uint64(e))
		case Float32:
			floats[i] = float64(math.Float32frombits(le.LittleEndian.Uint32(e)))
		case Float64:
			floats[i] = math.Float64frombits(le.LittleEndian.Uint64(e))
		default:
			return nil, nil, fmt.Errorf("metadata numbers of dtype %v", d)
		}
		if ints != nil {
			floats[i] = float64(ints[i])
			if d == Uint64 {
				floats[i] = float64(uint64(ints[i]))
			}
		}
	}
	return ints, floats, nil
}
