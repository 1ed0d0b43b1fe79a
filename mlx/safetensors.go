package mlx

/*
#include <stdlib.h>
#include "bridge.h"
*/
import "C"

import (
	le "encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"
)

// SaveSafetensors writes arrays and string metadata to path in the
// safetensors format, readable by Python's safetensors and MLX.
func SaveSafetensors(path string, arrays map[string]*Array, metadata map[string]string) error {
	names := make([]string, 0, len(arrays))
	for n := range arrays {
		names = append(names, n)
	}
	sort.Strings(names)
	arrs := make([]*Array, len(names))
	for i, n := range names {
		arrs[i] = arrays[n]
	}
	hs, err := handles(arrs)
	if err != nil {
		return fmt.Errorf("save %s: %w", path, err)
	}
	var toFree []unsafe.Pointer
	defer func() {
		for _, p := range toFree {
			C.free(p)
		}
	}()
	cstrs := func(ss []string) []*C.char {
		out := make([]*C.char, len(ss)+1)
		for i, s := range ss {
			out[i] = C.CString(s)
			toFree = append(toFree, unsafe.Pointer(out[i]))
		}
		return out
	}
	keys := make([]string, 0, len(metadata))
	for k := range metadata {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	vals := make([]string, len(keys))
	for i, k := range keys {
		vals[i] = metadata[k]
	}
	// The C arrays of C strings live in C memory: cgo forbids passing Go
	// memory that holds pointers.
	cn := cArray(cstrs(names), &toFree)
	ck := cArray(cstrs(keys), &toFree)
	cv := cArray(cstrs(vals), &toFree)
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	if _, err := call(func() C.int {
		return C.ptlm_save_safetensors(cpath, cn, &hs[0], C.size_t(len(arrs)), ck, cv, C.size_t(len(keys)))
	}); err != nil {
		return &Error{Op: "save_safetensors", Operands: path, Msg: err.Error()}
	}
	return nil
}

func cArray(ptrs []*C.char, toFree *[]unsafe.Pointer) **C.char {
	size := C.size_t(len(ptrs)) * C.size_t(unsafe.Sizeof((*C.char)(nil)))
	p := C.malloc(size)
	*toFree = append(*toFree, p)
	copy(unsafe.Slice((**C.char)(p), len(ptrs)), ptrs)
	return (**C.char)(p)
}

// safetensorsEntry is one tensor's header record.
type safetensorsEntry struct {
	Dtype   string
	Shape   []int64
	Offsets []int64
}

var safetensorsDtypeSize = map[string]int64{
	"BOOL": 1, "U8": 1, "I8": 1, "U16": 2, "I16": 2, "F16": 2, "BF16": 2,
	"U32": 4, "I32": 4, "F32": 4, "U64": 8, "I64": 8, "F64": 8, "C64": 8,
}

// maxSafetensorsHeader is the first JSON header length MLX's loader (like
// Python's safetensors) refuses: 100 MB, decimal.
const maxSafetensorsHeader = 100_000_000

// ValidateSafetensors checks that path is a complete, well-formed safetensors
// file: the header is a JSON object in valid UTF-8, every tensor has exactly
// the keys dtype, shape and data_offsets with a known dtype and dimensions
// that fit MLX's 32-bit shapes, its byte range matches its shape and lies
// inside the file, and the ranges tile the data section exactly. Names and
// metadata must not contain NUL bytes, which C strings cannot carry. MLX's
// own loader trusts much of this, so a truncated or corrupt file is rejected
// here with an error rather than read past its end or loaded wrongly.
func ValidateSafetensors(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	return validateSafetensors(f, st.Size())
}

func validateSafetensors(r io.Reader, size int64) error {
	var n uint64
	if err := le.Read(r, le.LittleEndian, &n); err != nil {
		return fmt.Errorf("safetensors: file of %d bytes has no 8-byte header length", size)
	}
	if n >= maxSafetensorsHeader || int64(n) > size-8 {
		return fmt.Errorf("safetensors: header length %d does not fit a file of %d bytes (limit %d)", n, size, maxSafetensorsHeader)
	}
	hdr := make([]byte, n)
	if _, err := io.ReadFull(r, hdr); err != nil {
		return fmt.Errorf("safetensors: reading %d-byte header: %w", n, err)
	}
	if !utf8.Valid(hdr) {
		return fmt.Errorf("safetensors: header is not valid UTF-8")
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(hdr, &raw); err != nil {
		return fmt.Errorf("safetensors: header is not a JSON object: %w", err)
	}
	if raw == nil {
		return fmt.Errorf("safetensors: header is null, want a JSON object")
	}
	// Go's decoder replaces unpaired UTF-16 surrogate escapes; MLX's
	// rejects them.
	if err := checkSurrogates(hdr); err != nil {
		return err
	}
	data := size - 8 - int64(n)
	type span struct{ begin, end int64 }
	var spans []span
	for name, msg := range raw {
		if strings.IndexByte(name, 0) >= 0 {
			return fmt.Errorf("safetensors: name %q contains a NUL byte", name)
		}
		if name == "__metadata__" {
			var meta map[string]string
			if err := json.Unmarshal(msg, &meta); err != nil {
				return fmt.Errorf("safetensors: __metadata__ must map strings to strings: %w", err)
			}
			for k, v := range meta {
				if strings.IndexByte(k, 0) >= 0 || strings.IndexByte(v, 0) >= 0 {
					return fmt.Errorf("safetensors: metadata %q contains a NUL byte", k)
				}
			}
			continue
		}
		e, err := parseSafetensorsEntry(msg)
		if err != nil {
			return fmt.Errorf("safetensors: tensor %q: %w", name, err)
		}
		es, ok := safetensorsDtypeSize[e.Dtype]
		if !ok {
			return fmt.Errorf("safetensors: tensor %q has unknown dtype %q", name, e.Dtype)
		}
		if len(e.Offsets) != 2 {
			return fmt.Errorf("safetensors: tensor %q needs 2 data_offsets, has %d", name, len(e.Offsets))
		}
		count := int64(1)
		for _, d := range e.Shape {
			if d < 0 || d > math.MaxInt32 || (d > 0 && count > (1<<62)/d) {
				return fmt.Errorf("safetensors: tensor %q has invalid shape %v", name, e.Shape)
			}
			count *= d
		}
		b, end := e.Offsets[0], e.Offsets[1]
		if b < 0 || end < b || end > data || end-b != count*es {
			return fmt.Errorf("safetensors: tensor %q (%s%v) has byte range [%d,%d), want %d bytes inside %d bytes of data",
				name, e.Dtype, e.Shape, b, end, count*es, data)
		}
		spans = append(spans, span{b, end})
	}
	sort.Slice(spans, func(i, j int) bool {
		if spans[i].begin != spans[j].begin {
			return spans[i].begin < spans[j].begin
		}
		return spans[i].end < spans[j].end
	})
	var at int64
	for _, s := range spans {
		if s.begin != at {
			return fmt.Errorf("safetensors: tensor data leaves a gap or overlap at byte %d", at)
		}
		at = s.end
	}
	if at != data {
		return fmt.Errorf("safetensors: tensors cover %d bytes but the data section has %d", at, data)
	}
	return nil
}

// parseSafetensorsEntry decodes one tensor record. Keys match exactly (Go's
// struct decoding would also accept "DType" or "Shape", which MLX does not),
// and each of the three must be present and not null.
func parseSafetensorsEntry(msg json.RawMessage) (safetensorsEntry, error) {
	var e safetensorsEntry
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(msg, &fields); err != nil || fields == nil {
		return e, fmt.Errorf("record is not a JSON object")
	}
	for _, f := range []struct {
		key string
		dst any
	}{{"dtype", &e.Dtype}, {"shape", &e.Shape}, {"data_offsets", &e.Offsets}} {
		v, ok := fields[f.key]
		if !ok || string(v) == "null" {
			return e, fmt.Errorf("record needs %q", f.key)
		}
		if err := json.Unmarshal(v, f.dst); err != nil {
			return e, fmt.Errorf("%s: %w", f.key, err)
		}
	}
	return e, nil
}

// checkSurrogates rejects \u escapes of UTF-16 surrogates that do not form
// a high-low pair. hdr must already be valid JSON, so every backslash is
// inside a string and starts an escape.
func checkSurrogates(hdr []byte) error {
	hex := func(i int) (rune, bool) {
		if i+6 > len(hdr) || hdr[i] != '\\' || hdr[i+1] != 'u' {
			return 0, false
		}
		v, err := strconv.ParseUint(string(hdr[i+2:i+6]), 16, 16)
		return rune(v), err == nil
	}
	for i := 0; i < len(hdr); i++ {
		if hdr[i] != '\\' {
			continue
		}
		r, ok := hex(i)
		if !ok {
			i++ // a one-character escape such as \" or \\
			continue
		}
		switch {
		case r >= 0xd800 && r < 0xdc00:
			if lo, ok := hex(i + 6); !ok || lo < 0xdc00 || lo >= 0xe000 {
				return fmt.Errorf("safetensors: header has an unpaired UTF-16 surrogate escape at byte %d", i)
			}
			i += 11
		case r >= 0xdc00 && r < 0xe000:
			return fmt.Errorf("safetensors: header has an unpaired UTF-16 surrogate escape at byte %d", i)
		default:
			i += 5
		}
	}
	return nil
}

// LoadSafetensors validates path (see ValidateSafetensors), then loads its
// arrays with MLX and evaluates them, so the file may be replaced afterwards.
func LoadSafetensors(path string) (map[string]*Array, map[string]string, error) {
	if err := ValidateSafetensors(path); err != nil {
		return nil, nil, fmt.Errorf("load %s: %w", path, err)
	}
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	// One call loads the file and copies out its names, handles and
	// metadata, so the loaded file's handle never leaves the MLX thread.
	var names []string
	var hs []C.ptlm_array
	meta := map[string]string{}
	onThread, err := call(func() C.int {
		var st C.ptlm_st
		if rc := C.ptlm_load_safetensors(cpath, &st); rc != C.PTLM_OK {
			return rc
		}
		defer C.ptlm_st_free(st)
		var n, nmeta C.size_t
		if rc := C.ptlm_st_num_arrays(st, &n); rc != C.PTLM_OK {
			return rc
		}
		for i := C.size_t(0); i < n; i++ {
			var name *C.char
			var h C.ptlm_array
			if rc := C.ptlm_st_array(st, i, &name, &h); rc != C.PTLM_OK {
				for _, h := range hs {
					C.ptlm_array_free(h)
				}
				return rc
			}
			names = append(names, C.GoString(name))
			hs = append(hs, h)
		}
		if C.ptlm_st_num_meta(st, &nmeta) == C.PTLM_OK {
			for i := C.size_t(0); i < nmeta; i++ {
				var k, v *C.char
				if C.ptlm_st_meta(st, i, &k, &v) == C.PTLM_OK {
					meta[C.GoString(k)] = C.GoString(v)
				}
			}
		}
		return C.PTLM_OK
	})
	if err != nil {
		return nil, nil, &Error{Op: "load_safetensors", Operands: path, Msg: err.Error()}
	}
	list := newArrays(hs, onThread)
	arrays := make(map[string]*Array, len(list))
	for i, a := range list {
		arrays[names[i]] = a
	}
	if err := Eval(list...); err != nil {
		Free(list...)
		return nil, nil, fmt.Errorf("load %s: %w", path, err)
	}
	return arrays, meta, nil
}
