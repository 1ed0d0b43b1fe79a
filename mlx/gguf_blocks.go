package mlx

import (
	le "encoding/binary"
	"fmt"
	"math"
)

// GGUFBlockTypes are the quantized GGML types that GGMLDequantize decodes
// on the host: the legacy 32-value blocks (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0)
// and the 256-value K-quants (Q2_K to Q6_K, and Q8_K). LoadGGUF keeps a
// file's tensors of these types as their raw blocks when MLX cannot read
// them exactly.
var GGUFBlockTypes = []GGMLType{GGMLQ4_0, GGMLQ4_1, GGMLQ5_0, GGMLQ5_1, GGMLQ8_0,
	GGMLQ2_K, GGMLQ3_K, GGMLQ4_K, GGMLQ5_K, GGMLQ6_K, GGMLQ8_K}

// ggmlBlockDecoders decode one block of a type into its values.
var ggmlBlockDecoders = map[GGMLType]func(b []byte, out []float32){
	GGMLQ4_0: decodeQ4_0, GGMLQ4_1: decodeQ4_1, GGMLQ5_0: decodeQ5_0, GGMLQ5_1: decodeQ5_1,
	GGMLQ8_0: decodeQ8_0, GGMLQ2_K: decodeQ2_K, GGMLQ3_K: decodeQ3_K, GGMLQ4_K: decodeQ4_K,
	GGMLQ5_K: decodeQ5_K, GGMLQ6_K: decodeQ6_K, GGMLQ8_K: decodeQ8_K,
}

// GGMLDequantize decodes raw, whole blocks of the quantized type typ as a
// GGUF file stores them, into float32 values in order. Each value is
// computed with the float32 operations, in the order, of llama.cpp's
// dequantize_row_* and of its Python package's gguf.quants.dequantize
// (a scale times a scale, times the quantized integer, minus the
// product of the minimum and its scale), rounding after every operation
// (no fused multiply-add), so the values are the same float32 numbers as
// theirs.
func GGMLDequantize(typ GGMLType, raw []byte) ([]float32, error) {
	decode, ok := ggmlBlockDecoders[typ]
	if !ok {
		return nil, fmt.Errorf("gguf: dequantizing %s is not supported; want one of %v", typ, GGUFBlockTypes)
	}
	info := ggmlTypes[typ]
	bs, bb := int(info.blockSize), int(info.blockBytes)
	if len(raw)%bb != 0 {
		return nil, fmt.Errorf("gguf: %d bytes of %s are not whole blocks of %d bytes", len(raw), typ, bb)
	}
	n := len(raw) / bb
	out := make([]float32, n*bs)
	for i := range n {
		decode(raw[i*bb:(i+1)*bb], out[i*bs:(i+1)*bs])
	}
	return out, nil
}

// halfAt is the float16 at b[0:2] as a float32 (exact).
func halfAt(b []byte) float32 { return halfToFloat32(le.LittleEndian.Uint16(b)) }

// halfToFloat32 widens an IEEE float16 exactly, subnormals, infinities
// and NaNs included.
func halfToFloat32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // infinity or NaN
		return math.Float32frombits(sign | 0xff<<23 | mant<<13)
	case exp != 0:
		return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
	case mant == 0:
		return math.Float32frombits(sign)
	}
	// Subnormal: mant·2⁻²⁴, exact in float32.
	v := float32(mant) * (1.0 / (1 << 24))
	if sign != 0 {
		v = -v
	}
	return v
}

// mul and sub round after each operation: the explicit conversions keep
// the compiler from fusing a multiply and an add.
func mul(a, b float32) float32 { return float32(a * b) }
func sub(a, b float32) float32 { return float32(a - b) }

// Q4_0: d (f16), 16 bytes of nibbles; value j is the low nibble of byte
// j, value j+16 its high nibble, each minus 8, times d.
func decodeQ4_0(b []byte, out []float32) {
	d, qs := halfAt(b), b[2:18]
	for j := range 16 {
		out[j] = mul(d, float32(int(qs[j]&0xf)-8))
		out[j+16] = mul(d, float32(int(qs[j]>>4)-8))
	}
}

// Q4_1: d and m (f16), 16 bytes of nibbles; value = d·q + m.
func decodeQ4_1(b []byte, out []float32) {
	d, m, qs := halfAt(b), halfAt(b[2:]), b[4:20]
	for j := range 16 {
		out[j] = float32(mul(d, float32(qs[j]&0xf)) + m)
		out[j+16] = float32(mul(d, float32(qs[j]>>4)) + m)
	}
}

// q5 is value j's 5-bit quantity of a Q5 block: the nibble of qs with bit
// j of qh above it.
func q5(qs []byte, qh uint32, j int) int {
	ql := qs[j%16] & 0xf
	if j >= 16 {
		ql = qs[j%16] >> 4
	}
	return int(ql) | int((qh>>j)&1)<<4
}

// Q5_0: d (f16), qh (32 high bits), 16 bytes of nibbles; value = d·(q − 16).
func decodeQ5_0(b []byte, out []float32) {
	d, qh, qs := halfAt(b), le.LittleEndian.Uint32(b[2:]), b[6:22]
	for j := range 32 {
		out[j] = mul(d, float32(q5(qs, qh, j)-16))
	}
}

// Q5_1: d and m (f16), qh, 16 bytes of nibbles; value = d·q + m.
func decodeQ5_1(b []byte, out []float32) {
	d, m, qh, qs := halfAt(b), halfAt(b[2:]), le.LittleEndian.Uint32(b[4:]), b[8:24]
	for j := range 32 {
		out[j] = float32(mul(d, float32(q5(qs, qh, j))) + m)
	}
}

// Q8_0: d (f16), 32 int8 values; value = q·d.
func decodeQ8_0(b []byte, out []float32) {
	d := halfAt(b)
	for j := range 32 {
		out[j] = mul(float32(int8(b[2+j])), d)
	}
}

// Q2_K: 16 bytes of 4-bit scale (low) and minimum (high) pairs, 64 bytes
// of 2-bit values, d and dmin (f16). Value i of the 256 sits in byte
// 32·(i/128) + i%32 at bit 2·((i/32)%4); its sub-block of 16 is i/16.
func decodeQ2_K(b []byte, out []float32) {
	scales, qs := b[:16], b[16:80]
	d, dmin := halfAt(b[80:]), halfAt(b[82:])
	for i := range 256 {
		sc := scales[i/16]
		dl, ml := mul(d, float32(sc&0xf)), mul(dmin, float32(sc>>4))
		q := (qs[32*(i/128)+i%32] >> (2 * ((i / 32) % 4))) & 3
		out[i] = sub(mul(dl, float32(q)), ml)
	}
}

// Q3_K: 32 bytes of high bits, 64 bytes of 2-bit low values, 12 bytes of
// 6-bit signed scales, d (f16). Value i's low bits are placed as Q2_K's,
// its high bit is bit i/32 of byte i%32 (a clear bit subtracts 4), and
// its scale is sub-block i/16's.
func decodeQ3_K(b []byte, out []float32) {
	hmask, qs, sc := b[:32], b[32:96], b[96:108]
	d := halfAt(b[108:])
	var scales [16]float32
	for i := range 16 {
		low := (sc[i%8] >> (4 * (i / 8))) & 0xf
		high := (sc[8+i%4] >> (2 * (i / 4))) & 3
		scales[i] = float32(int8(low|high<<4) - 32)
	}
	for i := range 256 {
		dl := mul(d, scales[i/16])
		q := int((qs[32*(i/128)+i%32] >> (2 * ((i / 32) % 4))) & 3)
		if (hmask[i%32]>>(i/32))&1 == 0 {
			q -= 4
		}
		out[i] = mul(dl, float32(q))
	}
}

// kScaleMin unpacks the eight 6-bit scales and minimums of a Q4_K or
// Q5_K block from its 12 bytes.
func kScaleMin(s []byte) (sc, mn [8]uint8) {
	for j := range 4 {
		sc[j], mn[j] = s[j]&0x3f, s[4+j]&0x3f
		sc[4+j] = s[8+j]&0xf | (s[j]>>2)&0x30
		mn[4+j] = s[8+j]>>4 | (s[4+j]>>2)&0x30
	}
	return sc, mn
}

// Q4_K: d and dmin (f16), 12 bytes of scales and minimums, 128 bytes of
// nibbles. Sub-block s of 32 values takes the low (even s) or high (odd
// s) nibbles of bytes 32·(s/2)…; value = (d·sc)·q − dmin·m.
func decodeQ4_K(b []byte, out []float32) {
	d, dmin := halfAt(b), halfAt(b[2:])
	sc, mn := kScaleMin(b[4:16])
	qs := b[16:144]
	for s := range 8 {
		ds, ms := mul(d, float32(sc[s])), mul(dmin, float32(mn[s]))
		for j := range 32 {
			q := (qs[32*(s/2)+j] >> (4 * (s % 2))) & 0xf
			out[32*s+j] = sub(mul(ds, float32(q)), ms)
		}
	}
}

// Q5_K is Q4_K with a fifth bit: sub-block s's is bit s of byte j of the
// 32 bytes that follow the scales.
func decodeQ5_K(b []byte, out []float32) {
	d, dmin := halfAt(b), halfAt(b[2:])
	sc, mn := kScaleMin(b[4:16])
	qh, qs := b[16:48], b[48:176]
	for s := range 8 {
		ds, ms := mul(d, float32(sc[s])), mul(dmin, float32(mn[s]))
		for j := range 32 {
			q := (qs[32*(s/2)+j]>>(4*(s%2)))&0xf | ((qh[j]>>s)&1)<<4
			out[32*s+j] = sub(mul(ds, float32(q)), ms)
		}
	}
}

// Q6_K: 128 bytes of low nibbles, 64 bytes of 2-bit high parts, 16 int8
// scales, d (f16). Value i = 128·h + 32·k + j (h half, k quarter) has its
// low nibble in byte 64·h + 32·(k%2) + j (high nibble for k ≥ 2), its
// high bits at 2·k of byte 32·h + j; value = (d·scale)·(q − 32).
func decodeQ6_K(b []byte, out []float32) {
	ql, qh, scales := b[:128], b[128:192], b[192:208]
	d := halfAt(b[208:])
	for i := range 256 {
		h, k, j := i/128, (i/32)%4, i%32
		low := (ql[64*h+32*(k%2)+j] >> (4 * (k / 2))) & 0xf
		high := (qh[32*h+j] >> (2 * k)) & 3
		dl := mul(d, float32(int8(scales[i/16])))
		out[i] = mul(dl, float32(int(low|high<<4)-32))
	}
}

// Q8_K: d (f32), 256 int8 values, 16 int16 sums (unused here); value = d·q.
func decodeQ8_K(b []byte, out []float32) {
	d := math.Float32frombits(le.LittleEndian.Uint32(b))
	for i := range 256 {
		out[i] = mul(d, float32(int8(b[4+i])))
	}
}
