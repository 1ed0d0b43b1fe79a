package mlx

import (
	le "encoding/binary"
	"fmt"
)

// Float32 returns the tensor's values as a new float32 array of
// Info.Shape. Float and integer tensors are converted (F32 is copied, F16
// and BF16 widen exactly). Quantized tensors are dequantized on the host
// as q·scale + bias, the product rounded to float32 before the sum, which
// is how llama.cpp and its Python package dequantize Q4_1: the values are
// the same float32 numbers as theirs (Q4_0 and Q8_0 values are exact
// products; a zero may differ from theirs in sign). Raw blocks are
// decoded by GGMLDequantize, to the same float32 numbers as theirs.
func (t *GGUFTensor) Float32() (*Array, error) {
	if t.Raw != nil {
		vals, err := GGMLDequantize(t.Info.Type, t.Raw)
		if err != nil {
			return nil, fmt.Errorf("gguf tensor %q: %w", t.Info.Name, err)
		}
		a := FromSlice(vals, t.Info.Shape...)
		return a, a.Err()
	}
	if !t.Quantized() {
		out := Copy(AsType(t.Data, Float32))
		if err := Eval(out); err != nil {
			return nil, fmt.Errorf("gguf tensor %q: %w", t.Info.Name, err)
		}
		return out, nil
	}
	words, err := t.Data.Bytes()
	if err != nil {
		return nil, fmt.Errorf("gguf tensor %q: %w", t.Info.Name, err)
	}
	scales, err := t.Scales.Float32s()
	if err != nil {
		return nil, fmt.Errorf("gguf tensor %q: %w", t.Info.Name, err)
	}
	biases, err := t.Biases.Float32s()
	if err != nil {
		return nil, fmt.Errorf("gguf tensor %q: %w", t.Info.Name, err)
	}
	out, err := dequantizeAffine(words, scales, biases, t.Bits, 32)
	if err != nil {
		return nil, fmt.Errorf("gguf tensor %q: %w", t.Info.Name, err)
	}
	a := FromSlice(out, t.Info.Shape...)
	return a, a.Err()
}

// dequantizeAffine unpacks MLX's affine quantization: words holds the
// values' bits little-endian, bits per value with the first value in the
// lowest bits; value i is q_i·scales[g] + biases[g] for its group g of
// group consecutive values.
func dequantizeAffine(words []byte, scales, biases []float32, bits, group int) ([]float32, error) {
	n := len(words) * 8 / bits
	if len(scales) != len(biases) || n != len(scales)*group {
		return nil, fmt.Errorf("%d bytes of %d-bit values with %d scales and %d biases in groups of %d do not match",
			len(words), bits, len(scales), len(biases), group)
	}
	out := make([]float32, n)
	switch bits {
	case 8:
		for i, q := range words {
			g := i / group
			// The conversion rounds the product before the sum: no fused
			// multiply-add, whatever the compiler targets.
			out[i] = float32(float32(q)*scales[g]) + biases[g]
		}
	case 4:
		for w := 0; w < len(words)/4; w++ {
			word := le.LittleEndian.Uint32(words[4*w:])
			for j := range 8 {
				i := 8*w + j
				g := i / group
				q := float32((word >> (4 * j)) & 0xF)
				out[i] = float32(q*scales[g]) + biases[g]
			}
		}
	default:
		return nil, fmt.Errorf("%d-bit values are not supported; want 4 or 8", bits)
	}
	return out, nil
}
