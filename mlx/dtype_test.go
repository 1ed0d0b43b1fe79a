package mlx

import (
	le "encoding/binary"
	"math"
	"testing"
)

// bf16Round rounds a float32 to bfloat16 with round-to-nearest-even on the
// top 16 bits and returns it as a float32; NaN stays NaN.
func bf16Round(f float32) float32 {
	bits := math.Float32bits(f)
	if f != f {
		return f
	}
	bits += 0x7fff + (bits>>16)&1
	return math.Float32frombits(bits &^ 0xffff)
}

func TestBFloat16RoundTrip(t *testing.T) {
	onMLX(t, func() {
		in := []float32{
			0, float32(math.Copysign(0, -1)), 1, -1, 0.1, -3.14159, 1e-3, 65504, 1e30, -1e-30,
			1 + 1.0/256,             // exactly halfway between two bf16 values: ties to even (1)
			1 + 3.0/256,             // halfway again: ties to even (1 + 4/256)
			1 + 1.0/256 + 1.0/65536, // just above halfway: rounds up
			math.MaxFloat32,         // rounds up to +Inf
			math.SmallestNonzeroFloat32,
			float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()),
		}
		for _, v := range lcg(40, 200) {
			in = append(in, float32(v*1000))
		}
		bf := AsType(FromSlice(in), BFloat16)
		if bf.Dtype() != BFloat16 || bf.Nbytes() != 2*len(in) {
			t.Fatalf("bfloat16 array: dtype %v, %d bytes", bf.Dtype(), bf.Nbytes())
		}
		got, err := AsType(bf, Float32).Float32s()
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range in {
			want := bf16Round(v)
			if want != want {
				if got[i] == got[i] {
					t.Fatalf("bf16(NaN) = %v, want NaN", got[i])
				}
				continue
			}
			if math.Float32bits(got[i]) != math.Float32bits(want) {
				t.Fatalf("bf16 round trip of %v (%#08x) = %v (%#08x), want %v (%#08x)",
					v, math.Float32bits(v), got[i], math.Float32bits(got[i]), want, math.Float32bits(want))
			}
		}
		// The raw bytes are exactly the top halves of the rounded float32 bits.
		raw, err := bf.Bytes()
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range in {
			want := bf16Round(v)
			if v != v {
				continue
			}
			if b := le.LittleEndian.Uint16(raw[2*i:]); b != uint16(math.Float32bits(want)>>16) {
				t.Fatalf("bf16 bits of %v = %#04x, want %#04x", v, b, math.Float32bits(want)>>16)
			}
		}
	})
}

func TestBFloat16RawBytes(t *testing.T) {
	onMLX(t, func() {
		// Every bit pattern class: zeros, normals, subnormals, infinities and
		// NaNs with payloads pass through FromBytes and Bytes unchanged.
		patterns := []uint16{0x0000, 0x8000, 0x3f80, 0xbf80, 0x0001, 0x807f, 0x7f7f, 0x7f80, 0xff80,
			0x7fc0, 0x7fc1, 0xffff, 0x4049, 0x1234}
		for _, v := range lcg(41, 64) {
			patterns = append(patterns, uint16(int64((v+1)*32767)))
		}
		raw := make([]byte, 2*len(patterns))
		for i, p := range patterns {
			le.LittleEndian.PutUint16(raw[2*i:], p)
		}
		a := FromBytes(raw, BFloat16, 2, len(patterns)/2)
		checkShape(t, "bf16 from bytes", a, 2, len(patterns)/2)
		if a.Dtype() != BFloat16 {
			t.Fatalf("FromBytes dtype %v", a.Dtype())
		}
		back, err := a.Bytes()
		if err != nil {
			t.Fatal(err)
		}
		if string(back) != string(raw) {
			t.Fatalf("bf16 bytes changed in a round trip:\n%x\n%x", raw, back)
		}
		// A transposed (non-contiguous) view reads back in row-major order.
		tb, err := Transpose(a).Bytes()
		if err != nil {
			t.Fatal(err)
		}
		cols := len(patterns) / 2
		for i := range cols {
			for r := range 2 {
				got := le.LittleEndian.Uint16(tb[2*(i*2+r):])
				if want := patterns[r*cols+i]; got != want {
					t.Fatalf("transposed bf16 [%d,%d] = %#04x, want %#04x", i, r, got, want)
				}
			}
		}
		// Values of known patterns: 0x3f80 is 1.0, 0x4049 is 3.140625.
		v := values(t, FromBytes([]byte{0x80, 0x3f, 0x49, 0x40}, BFloat16, 2))
		if v[0] != 1 || v[1] != 3.140625 {
			t.Fatalf("bf16 0x3f80, 0x4049 read as %v, want [1 3.140625]", v)
		}
		if FromBytes(raw[:3], BFloat16, 1).Err() == nil {
			t.Fatal("FromBytes with 3 bytes for one bfloat16 succeeded")
		}
	})
}

func TestParseDtype(t *testing.T) {
	for name, want := range map[string]Dtype{"float32": Float32, "fp32": Float32, "bfloat16": BFloat16, "bf16": BFloat16,
		"float16": Float16, "fp16": Float16, "int32": Int32, "bool": Bool} {
		got, err := ParseDtype(name)
		if err != nil || got != want {
			t.Fatalf("ParseDtype(%q) = %v, %v; want %v", name, got, err, want)
		}
	}
	if _, err := ParseDtype("float8"); err == nil {
		t.Fatal("ParseDtype(float8) succeeded")
	}
	if BFloat16.Size() != 2 || Float32.Size() != 4 || Int64.Size() != 8 || Bool.Size() != 1 {
		t.Fatal("dtype sizes wrong")
	}
}
