//go:build gpu

// GPU tests: built only with -tags gpu (make test-gpu-bin) and run on a
// machine with a CUDA GPU and libmlx.so from mlx-cuda-13 (scripts/gpu-bench.sh).
// They fail, never skip, when no GPU is there.

package mlx

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// onGPU makes the GPU the thread's default device for the test, failing it
// when this libmlx.so has none, and restores the CPU afterwards.
func onGPU(t *testing.T) {
	t.Helper()
	if !GPU.Available() {
		t.Fatal("no GPU: this libmlx.so has no CUDA backend or no device is visible (run with LD_LIBRARY_PATH at mlx-cuda-13's mlx/lib)")
	}
	if err := SetDefaultDevice(GPU); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := SetDefaultDevice(CPU); err != nil {
			t.Errorf("restoring the CPU device: %v", err)
		}
	})
}

// relErr is ‖got − want‖ / ‖want‖.
func relErr(t *testing.T, name string, got, want []float64) float64 {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", name, len(got), len(want))
	}
	var num, den float64
	for i := range got {
		if math.IsNaN(got[i]) || math.IsInf(got[i], 0) {
			t.Fatalf("%s[%d] = %v, want a finite value", name, i, got[i])
		}
		d := got[i] - want[i]
		num += d * d
		den += want[i] * want[i]
	}
	return math.Sqrt(num / den)
}

// MLX sizes the GPU: an H200's 141 GB, say, and at least a gigabyte.
func TestGPUMemory(t *testing.T) {
	onMLX(t, func() {
		onGPU(t)
		if n, err := GPU.Memory(); err != nil || n < 1<<30 {
			t.Fatalf("GPU memory %d bytes (err %v), want the device's memory", n, err)
		}
	})
}

func TestGPUDeviceIsDefault(t *testing.T) {
	onMLX(t, func() {
		onGPU(t)
		if d := DefaultDevice(); d != GPU {
			t.Fatalf("default device %s after SetDefaultDevice(GPU), want gpu", d)
		}
		a := f32([]float64{1, 2, 3}, 3)
		checkClose(t, "a·2+1 on the GPU", AddScalar(MulScalar(a, 2), 1), []int{3}, []float64{3, 5, 7}, 0)
		if err := Synchronize(); err != nil {
			t.Fatal(err)
		}
		if m := Memory(); m.Peak == 0 {
			t.Fatalf("GPU peak memory %d after an evaluation, want > 0", m.Peak)
		}
	})
}

// attentionBlock is a small transformer piece in bfloat16: RMSNorm, a
// projection, RoPE, causal fused attention, GELU and a float32 reduction.
func attentionBlock(in []*Array) ([]*Array, error) {
	x, w, g := AsType(in[0], BFloat16), AsType(in[1], BFloat16), AsType(in[2], BFloat16)
	h := Matmul(RMSNorm(x, g, 1e-5), Transpose(w)) // [B, T, D]
	q := RoPE(Transpose(Reshape(h, 2, 16, 2, 8), 0, 2, 1, 3), 8, false, 10000, 1, 0)
	o := ScaledDotProductAttention(q, q, q, 0.35, CausalMask, nil)
	o = Reshape(Transpose(o, 0, 2, 1, 3), 2, 16, 16)
	y := Multiply(MulScalar(o, 0.5), AddScalar(Erf(MulScalar(o, 1/math.Sqrt2)), 1))
	y32 := AsType(y, Float32)
	return []*Array{y32, Sum(Square(y32))}, nil
}

func TestGPUCompiledMatchesCPU(t *testing.T) {
	onMLX(t, func() {
		x, w, g := f32(lcg(1, 2*16*16), 2, 16, 16), f32(lcg(2, 16*16), 16, 16), f32(lcg(3, 16), 16)
		want, err := attentionBlock([]*Array{x, w, g})
		if err != nil {
			t.Fatal(err)
		}
		wantY, wantS := values(t, want[0]), values(t, want[1])
		onGPU(t)
		c, err := Compile(attentionBlock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Free()
		got, err := c.Call(x, w, g)
		if err != nil {
			t.Fatal(err)
		}
		// bfloat16 operands on two backends: agreement within 1e-2 is the
		// expected range (METHOD.md: bf16 between 1e-3 and 1e-2).
		if e := relErr(t, "y", values(t, got[0]), wantY); e > 1e-2 {
			t.Fatalf("GPU compiled y differs from the CPU by %.3g (relative norm), want <= 1e-2", e)
		}
		if e := relErr(t, "sum", values(t, got[1]), wantS); e > 1e-2 {
			t.Fatalf("GPU compiled sum differs from the CPU by %.3g, want <= 1e-2", e)
		}
	})
}

func TestGPUGradMatchesCPU(t *testing.T) {
	onMLX(t, func() {
		loss := func(in []*Array) ([]*Array, error) {
			h := Matmul(in[0], in[1])
			return []*Array{Mean(Square(Tanh(h)))}, nil
		}
		x, w := f32(lcg(4, 64*32), 64, 32), f32(lcg(5, 32*48), 32, 48)
		grad := func() ([]float64, []float64) {
			vg, err := ValueAndGrad(loss, 1)
			if err != nil {
				t.Fatal(err)
			}
			defer vg.Free()
			v, g, err := vg.Call(x, w)
			if err != nil {
				t.Fatal(err)
			}
			return values(t, v[0]), values(t, g[0])
		}
		wantV, wantG := grad()
		onGPU(t)
		gotV, gotG := grad()
		// float32 on the GPU may use TF32 matrix units: allow 1e-3.
		if e := relErr(t, "loss", gotV, wantV); e > 1e-3 {
			t.Fatalf("GPU loss differs from the CPU by %.3g, want <= 1e-3", e)
		}
		if e := relErr(t, "grad", gotG, wantG); e > 1e-3 {
			t.Fatalf("GPU gradient differs from the CPU by %.3g, want <= 1e-3", e)
		}
	})
}

// A custom CUDA kernel runs on the GPU with its template arguments, inside
// a compiled function too, and two outputs of different dtypes come back.
func TestGPUCUDAKernel(t *testing.T) {
	onMLX(t, func() {
		onGPU(t)
		if !CUDAAvailable() {
			t.Fatal("CUDAAvailable is false with a GPU device")
		}
		k, err := NewCUDAKernel("ptlm_test_affine", []string{"x"}, []string{"y", "n"}, `
  const unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= N) return;
  y[i] = static_cast<float>(x[i]) * A - B;
  n[i] = (int)i;
`, "")
		if err != nil {
			t.Fatal(err)
		}
		defer k.Free()
		in := []float32{1, -2, 3.5, 0, 10}
		apply := func(inputs []*Array) ([]*Array, error) {
			return k.Apply(inputs, KernelLaunch{
				OutputShapes: [][]int{{len(in)}, {len(in)}}, OutputDtypes: []Dtype{Float32, Int32},
				Grid: [3]int{256, 1, 1}, Block: [3]int{256, 1, 1},
				Template: []KernelArg{{"N", len(in)}, {"A", 3}, {"B", 1}},
			})
		}
		compiled, err := Compile(apply)
		if err != nil {
			t.Fatal(err)
		}
		defer compiled.Free()
		// Malformed launches are refused with the counts that are wrong.
		x := FromSlice(in, len(in))
		for _, c := range []struct {
			name   string
			inputs []*Array
			launch KernelLaunch
			want   string
		}{
			{"no outputs", []*Array{x}, KernelLaunch{}, "0 output shapes"},
			{"dtypes short", []*Array{x}, KernelLaunch{OutputShapes: [][]int{{1}}}, "1 output shapes and 0 dtypes"},
			{"no inputs", nil, KernelLaunch{OutputShapes: [][]int{{1}}, OutputDtypes: []Dtype{Float32}}, "no inputs"},
			{"negative template argument", []*Array{x}, KernelLaunch{OutputShapes: [][]int{{1}}, OutputDtypes: []Dtype{Float32},
				Template: []KernelArg{{"B", -1}}}, "template argument B = -1"},
		} {
			if _, err := k.Apply(c.inputs, c.launch); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("%s: err %v, want one containing %q", c.name, err, c.want)
			}
		}
		for _, run := range []Func{apply, func(in []*Array) ([]*Array, error) { return compiled.Call(in...) }} {
			out, err := run([]*Array{FromSlice(in, len(in))})
			if err != nil {
				t.Fatal(err)
			}
			y, err := ToSlice[float32](out[0])
			if err != nil {
				t.Fatal(err)
			}
			n, err := ToSlice[int32](out[1])
			if err != nil {
				t.Fatal(err)
			}
			for i, v := range in {
				if y[i] != 3*v-1 || n[i] != int32(i) {
					t.Fatalf("element %d: y %v n %d, want %v and %d", i, y[i], n[i], 3*v-1, i)
				}
			}
		}
	})
}

// A custom kernel's compiled code goes into MLX's kernel cache under MLX's
// name for it, before MLX compiles it: MLX loads that module (the bridge's
// NVRTC build, with the signature MLX generates) and the kernel computes
// what its source says, with a bfloat16 input and two outputs.
func TestGPUCustomKernelCached(t *testing.T) {
	onMLX(t, func() {
		onGPU(t)
		name := fmt.Sprintf("ptlm_test_cached_%d", time.Now().UnixNano())
		k, err := NewCUDAKernel(name, []string{"x"}, []string{"y", "n"}, `
  const unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= N) return;
  y[i] = static_cast<float>(x[i]) * A - B;
  n[i] = (int)i;
`, "")
		if err != nil {
			t.Fatal(err)
		}
		defer k.Free()
		in := []float32{1, -2, 3.5, 0, 10}
		x := AsType(FromSlice(in, len(in)), BFloat16)
		out, err := k.Apply([]*Array{x}, KernelLaunch{
			OutputShapes: [][]int{{len(in)}, {len(in)}}, OutputDtypes: []Dtype{Float32, Int32},
			Grid: [3]int{256, 1, 1}, Block: [3]int{256, 1, 1},
			Template: []KernelArg{{"N", len(in)}, {"A", 3}, {"B", 1}},
		})
		if err != nil {
			t.Fatal(err)
		}
		dir := os.Getenv(KernelCacheEnv)
		if dir == "" {
			v, err := Version()
			if err != nil {
				t.Fatal(err)
			}
			dir = filepath.Join(os.TempDir(), "mlx", v, "ptx")
		}
		module := filepath.Join(dir, "custom_kernel_"+name+"_5_3_1")
		txt, err := os.ReadFile(module + ".txt")
		if err != nil {
			t.Fatalf("the kernel's module is not in MLX's cache %s: %v", dir, err)
		}
		if want := "mlx::core::cu::custom_kernel_" + name + "_5_3_1\t"; !strings.HasPrefix(string(txt), want) {
			t.Fatalf("%s.txt holds %q, want a line starting %q", module, txt, want)
		}
		if fi, err := os.Stat(module + ".ptx"); err != nil || fi.Size() == 0 {
			t.Fatalf("%s.ptx: %v", module, err)
		}
		y, err := ToSlice[float32](out[0])
		if err != nil {
			t.Fatal(err)
		}
		n, err := ToSlice[int32](out[1])
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range in {
			if y[i] != 3*v-1 || n[i] != int32(i) {
				t.Fatalf("element %d: y %v n %d, want %v and %d", i, y[i], n[i], 3*v-1, i)
			}
		}
		for _, f := range []string{".txt", ".ptx", ".cu"} {
			os.Remove(module + f)
		}
	})
}
