package mlx

import (
	"bufio"
	"fmt"
	"os"
	"slices"
)

// ggufHostDtypes are the MLX dtypes of the float and integer tensor types
// loadGGUFHost reads as they are.
var ggufHostDtypes = map[GGMLType]Dtype{GGMLF32: Float32, GGMLF16: Float16, GGMLBF16: BFloat16,
	GGMLI8: Int8, GGMLI16: Int16, GGMLI32: Int32}

// ggufMetaDtypes are the MLX dtypes of GGUF's numeric metadata types, as
// MLX's reader returns them.
var ggufMetaDtypes = map[uint32]Dtype{ggufUint8: Uint8, ggufInt8: Int8, ggufUint16: Uint16, ggufInt16: Int16,
	ggufUint32: Uint32, ggufInt32: Int32, ggufFloat32: Float32, ggufBool: Bool, ggufUint64: Uint64,
	ggufInt64: Int64, ggufFloat64: Float64}

// needsHostLoad reports whether h has a tensor that MLX's reader cannot
// read exactly but GGMLDequantize can: such a file is read by
// loadGGUFHost.
func needsHostLoad(h *GGUFHeader) bool {
	for _, t := range h.Tensors {
		if !slices.Contains(GGUFLoadable, t.Type) && slices.Contains(GGUFBlockTypes, t.Type) {
			return true
		}
	}
	return false
}

// loadGGUFHost reads the file path, whose structure h describes, without
// MLX's reader: metadata as MLX would return it, float and integer
// tensors as arrays of their own dtype, and every quantized tensor as its
// raw blocks (GGUFTensor.Raw), which Float32 dequantizes on the host.
func loadGGUFHost(path string, h *GGUFHeader) (*GGUFFile, error) {
	meta, err := readGGUFMetadata(path, h)
	if err != nil {
		return nil, fmt.Errorf("gguf: %s: %w", path, err)
	}
	out := &GGUFFile{Header: h, Tensors: map[string]*GGUFTensor{}, Metadata: meta}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	for _, info := range h.Tensors {
		b := make([]byte, info.Size)
		if _, err := f.ReadAt(b, info.Offset); err != nil {
			out.Free()
			return nil, fmt.Errorf("gguf: %s: tensor %q: reading %d bytes at %d: %w", path, info.Name, info.Size, info.Offset, err)
		}
		t := &GGUFTensor{Info: info}
		if slices.Contains(GGUFBlockTypes, info.Type) {
			t.Raw = b
		} else if err := Do(func() error {
			t.Data = FromBytes(b, ggufHostDtypes[info.Type], info.Shape...)
			return Eval(t.Data)
		}); err != nil {
			out.Free()
			return nil, fmt.Errorf("gguf: %s: tensor %q: %w", path, info.Name, err)
		}
		out.Tensors[info.Name] = t
	}
	return out, nil
}

// readGGUFMetadata reads every metadata value of the GGUF file path
// (whose header h has been checked) as MLX's reader returns them: numbers
// and arrays of numbers in their own dtype, strings, arrays of strings.
func readGGUFMetadata(path string, h *GGUFHeader) (map[string]GGUFValue, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	g := &ggufReader{r: bufio.NewReaderSize(f, 1<<20), size: st.Size(), what: "the header"}
	if err := g.skip(8); err != nil { // magic and version
		return nil, err
	}
	if err := g.skip(8); err != nil { // tensor count
		return nil, err
	}
	nKV, err := g.u64()
	if err != nil {
		return nil, err
	}
	meta := make(map[string]GGUFValue, nKV)
	for range nKV {
		key, err := g.str()
		if err != nil {
			return nil, err
		}
		g.what = fmt.Sprintf("metadata %q", key)
		typ, err := g.u32()
		if err != nil {
			return nil, err
		}
		v := GGUFValue{Scalar: typ != ggufArray}
		n := uint64(1)
		if typ == ggufArray {
			if typ, err = g.u32(); err != nil {
				return nil, err
			}
			if n, err = g.u64(); err != nil {
				return nil, err
			}
		}
		if typ == ggufString {
			strs := make([]string, n)
			for i := range strs {
				if strs[i], err = g.str(); err != nil {
					return nil, err
				}
			}
			if v.Scalar {
				v.Kind, v.String = GGUFString, strs[0]
			} else {
				v.Kind, v.Strings = GGUFStrings, strs
			}
			meta[key] = v
			continue
		}
		dt, ok := ggufMetaDtypes[typ]
		if !ok {
			return nil, fmt.Errorf("%s has value type %s, which this reader does not decode", g.what, ggufValueName(typ))
		}
		size := ggufValueSize[typ]
		if err := g.need(int64(n) * size); err != nil {
			return nil, err
		}
		b, err := g.bytes(int64(n) * size)
		if err != nil {
			return nil, err
		}
		v.Kind, v.Dtype = GGUFNumbers, dt
		if v.Ints, v.Floats, err = decodeNumbers(b, dt); err != nil {
			return nil, fmt.Errorf("%s: %w", g.what, err)
		}
		meta[key] = v
	}
	if len(meta) != len(h.Keys) {
		return nil, fmt.Errorf("read %d metadata values, the header lists %d", len(meta), len(h.Keys))
	}
	return meta, nil
}
