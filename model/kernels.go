package model

import (
	"fmt"
	"math"

	"github.com/posttrainllm/posttrainllm/mlx"
)

// The model's own CUDA kernels, for the two places where MLX's built-in
// kernels cost the GPU step most (docs/performance/gpu.md, "Where the time
// goes"):
//
//   - attention's heads: MLX splits the q/k/v projection into strided
//     views, rotates q and k with one RoPE kernel each (slow on strided
//     input), and its backward pass runs two more RoPE kernels and copies
//     the three head gradients back into the projection's rows. headsFwd
//     reads the projection's rows once and writes q, k (rotated) and v as
//     contiguous [B, H, T, hd] arrays; headsBwd reads their gradients and
//     writes the projection's gradient rows, rotated back.
//   - RMSNorm: MLX reduces the gain's gradient over all B·T rows with a
//     column reduction that runs on a handful of thread blocks (about
//     80 µs for 8,192 rows of 256). normBwd computes the input's gradient
//     and per-block partial sums of the gain's gradient in one pass, and
//     adds the gradient of the residual stream the norm's input continues
//     in (which autodiff would add with a kernel of its own); normGainSum
//     adds the partial sums up. normFwd is the forward pass, a warp per
//     row.
//
// Each kernel computes in float32 what MLX's kernels compute, rounding
// once to the compute dtype; TestGPUKernelsMatchMLXOps (gpu_test.go)
// checks losses and gradients against MLX's operations. Template
// arguments carry every size, so each shape is a kernel of its own in
// MLX's cache; floats travel as their (non-negative) bit patterns.
const (
	// headsPosition starts both heads kernels: thread idx takes the pair
	// (i, i + hd/2) of head slot j (q heads, then k, then v) of row
	// r = b·T + t.
	headsPosition = `
  const unsigned int idx = blockIdx.x * blockDim.x + threadIdx.x;
  constexpr int HALF = HD / 2, NH = HQ + 2 * HKV;
  if (idx >= (unsigned int)R * NH * HALF) return;
  const int i = idx % HALF, j = (idx / HALF) % NH, r = idx / (HALF * NH);
  const int b = r / T, t = r % T;`
	headsFwdSource = headsPosition + `
  const auto* src = qkv + (size_t)r * (NH * HD) + j * HD;
  float x1 = static_cast<float>(src[i]), x2 = static_cast<float>(src[i + HALF]);
  if (ROTATE && j < HQ + HKV) {
    const float inv = exp2f(-__int_as_float(LOG2BASE_BITS) * (float)i / (float)HALF);
    float s, c;
    sincosf(__int_as_float(SCALE_BITS) * (float)(t + OFFSET) * inv, &s, &c);
    const float o1 = x1 * c - x2 * s;
    x2 = x1 * s + x2 * c;
    x1 = o1;
  }
  size_t o;
  if (j < HQ) {
    o = (((size_t)b * HQ + j) * T + t) * HD;
    q[o + i] = x1; q[o + i + HALF] = x2;
  } else if (j < HQ + HKV) {
    o = (((size_t)b * HKV + (j - HQ)) * T + t) * HD;
    k[o + i] = x1; k[o + i + HALF] = x2;
  } else {
    o = (((size_t)b * HKV + (j - HQ - HKV)) * T + t) * HD;
    v[o + i] = x1; v[o + i + HALF] = x2;
  }
`
	headsBwdSource = headsPosition + `
  float x1, x2;
  size_t o;
  if (j < HQ) {
    o = (((size_t)b * HQ + j) * T + t) * HD;
    x1 = static_cast<float>(dq[o + i]); x2 = static_cast<float>(dq[o + i + HALF]);
  } else if (j < HQ + HKV) {
    o = (((size_t)b * HKV + (j - HQ)) * T + t) * HD;
    x1 = static_cast<float>(dk[o + i]); x2 = static_cast<float>(dk[o + i + HALF]);
  } else {
    o = (((size_t)b * HKV + (j - HQ - HKV)) * T + t) * HD;
    x1 = static_cast<float>(dv[o + i]); x2 = static_cast<float>(dv[o + i + HALF]);
  }
  if (ROTATE && j < HQ + HKV) {
    const float inv = exp2f(-__int_as_float(LOG2BASE_BITS) * (float)i / (float)HALF);
    float s, c;
    sincosf(__int_as_float(SCALE_BITS) * (float)(t + OFFSET) * inv, &s, &c);
    const float o1 = x1 * c + x2 * s;
    x2 = x2 * c - x1 * s;
    x1 = o1;
  }
  auto* dst = dqkv + (size_t)r * (NH * HD) + j * HD;
  dst[i] = x1; dst[i + HALF] = x2;
`
	// normFwdSource is RMSNorm's forward pass, a warp per row of D:
	// y = x·r⊙w with r = 1/√(mean(x²) + eps), in float32, rounded once.
	// (MLX's kernel for narrow rows runs a few rows per block with a
	// block-wide reduction: about 8 µs for 8,192 rows of 256 on an H200.)
	normFwdSource = `
  constexpr int PER = (D + 31) / 32;
  const int lane = threadIdx.x & 31;
  const int r = blockIdx.x * 8 + (threadIdx.x >> 5);
  if (r >= R) return;
  const auto* xr = x + (size_t)r * D;
  float xv[PER], ss = 0.f;
  for (int p = 0; p < PER; p++) {
    const int c = lane + 32 * p;
    xv[p] = c < D ? static_cast<float>(xr[c]) : 0.f;
    ss += xv[p] * xv[p];
  }
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffff, ss, o);
  const float rinv = rsqrtf(ss / D + __int_as_float(EPS_BITS));
  for (int p = 0; p < PER; p++) {
    const int c = lane + 32 * p;
    if (c < D) y[(size_t)r * D + c] = xv[p] * rinv * static_cast<float>(w[c]);
  }
`
	// normBwdSource runs 256 threads per block, a warp per row at a time,
	// over rows [blockIdx.x·RB, +RB): dx = r·g⊙w − (r³/D)·x·Σ(g⊙w⊙x) with
	// r = 1/√(mean(x²) + eps), plus with RES the residual's gradient dr,
	// and the block's partial sum of g⊙x·r (the gain's gradient) per
	// column into part[blockIdx.x].
	normBwdSource = `
  constexpr int PER = (D + 31) / 32;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const float eps = __int_as_float(EPS_BITS);
  __shared__ float sm[8][D];
  float acc[PER];
  for (int p = 0; p < PER; p++) acc[p] = 0.f;
  const int r0 = blockIdx.x * RB, r1 = min(r0 + RB, R);
  for (int r = r0 + warp; r < r1; r += 8) {
    const auto* xr = x + (size_t)r * D;
    const auto* gr = dy + (size_t)r * D;
    float xv[PER], gv[PER], rv[PER], ss = 0.f, gx = 0.f;
    for (int p = 0; p < PER; p++) {
      const int c = lane + 32 * p;
      xv[p] = 0.f; gv[p] = 0.f; rv[p] = 0.f;
      if (c < D) {
        xv[p] = static_cast<float>(xr[c]);
        gv[p] = static_cast<float>(gr[c]);
        if (RES) rv[p] = static_cast<float>(dr[(size_t)r * D + c]); // loaded with the row, not after its sums
        ss += xv[p] * xv[p];
        gx += gv[p] * static_cast<float>(w[c]) * xv[p];
      }
    }
    for (int o = 16; o > 0; o >>= 1) {
      ss += __shfl_xor_sync(0xffffffff, ss, o);
      gx += __shfl_xor_sync(0xffffffff, gx, o);
    }
    const float rinv = rsqrtf(ss / D + eps);
    const float k = rinv * rinv * rinv * gx / D;
    for (int p = 0; p < PER; p++) {
      const int c = lane + 32 * p;
      if (c < D) {
        dx[(size_t)r * D + c] = rinv * gv[p] * static_cast<float>(w[c]) - k * xv[p] + rv[p];
        acc[p] += gv[p] * xv[p] * rinv;
      }
    }
  }
  for (int p = 0; p < PER; p++) {
    const int c = lane + 32 * p;
    if (c < D) sm[warp][c] = acc[p];
  }
  __syncthreads();
  for (int c = threadIdx.x; c < D; c += blockDim.x) {
    float s = 0.f;
    for (int k2 = 0; k2 < 8; k2++) s += sm[k2][c];
    part[(size_t)blockIdx.x * D + c] = s;
  }
`
	// normGainSumSource adds the NB partial sums of each of D columns: a
	// block per 32 columns, its 8 warps over every 8th partial, then the
	// block's shared sum.
	normGainSumSource = `
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int c = blockIdx.x * 32 + lane;
  __shared__ float sm[8][32];
  float s = 0.f;
  if (c < D) {
    for (int b = warp; b < NB; b += 8) s += part[(size_t)b * D + c];
  }
  sm[warp][lane] = s;
  __syncthreads();
  if (warp == 0 && c < D) {
    float t = 0.f;
    for (int k2 = 0; k2 < 8; k2++) t += sm[k2][lane];
    dw[c] = t;
  }
`
)

// maxKernelNormDim is the widest row normBwd takes: its block keeps 8 rows
// of partial sums in 48 KB of shared memory.
const maxKernelNormDim = 1536

// kernels are the model's CUDA kernels wrapped as custom-VJP operations
// for one forward pass (see the sources above); a nil field means MLX's
// own operations. Free releases them.
type kernels struct {
	heads *mlx.Closure // qkv rows [R, (H+2KV)·hd] -> q, k, v [B, h, T, hd]
	norm  *mlx.Closure // RMSNorm of x [rows, D] with gain w
	// normRes is norm with x passed through as a second output, the
	// residual stream: its backward pass adds the residual's gradient to
	// the norm's in the same kernel, where autodiff would add the two
	// with a kernel of its own.
	normRes *mlx.Closure
	rows    int // the rows R = B·T all were built for
	dim     int // the width of the rows the norm kernels take (DModel)
}

// kernelUse says which of the CUDA kernels a forward pass of a config
// over B×T positions without a KV cache may use. It is the one place
// that decides by configuration; everything a kernel does not compute
// exactly runs through MLX's operations instead.
type kernelUse struct {
	// heads: the heads kernel splits the stacked projection (biases
	// included: qkvRows adds them before the kernel), lays out any head
	// width and head counts, and rotates q and k with frequencies
	// base^(−2i/HeadDim) at positions scaled linearly. It has no per-head
	// norm between the split and the rotation (QKNorm) and no scaled
	// frequency table (RoPEType llama3); its rotation constants travel as
	// non-negative float bit patterns (a base below 1 has a negative
	// log₂) and it indexes its threads with 32 bits.
	heads bool
	// norm: the RMSNorm kernels take the residual stream's rows of
	// DModel ≤ maxKernelNormDim; LayerNorm families and the per-head q/k
	// norms run through MLX's.
	norm bool
}

// kernelUse is the kernels config c may use for B×T positions.
func (c Config) kernelUse(B, T int) kernelUse {
	hd := c.HeadDim()
	rotation := c.learnedPositions() || (c.RoPEBase >= 1 && c.ropeScale() > 0 && c.RoPEType == "")
	n := B * T * (c.Heads + 2*c.KVHeadCount()) * hd / 2
	return kernelUse{
		heads: hd%2 == 0 && rotation && !c.QKNorm && c.RoPELocalBase == 0 && n < math.MaxInt32-256,
		norm:  !c.layerNorm() && c.DModel <= maxKernelNormDim,
	}
}

// newKernels builds the kernels formulation f uses for a forward pass of
// B×T positions; the zero kernels when f uses none or the pass continues a
// KV cache (the kernels place positions from 0).
func (m *Transformer) newKernels(f formulation, B, T int, cached bool) (kernels, error) {
	c := m.Config
	k := kernels{rows: B * T, dim: c.DModel}
	if !f.cudaKernels || cached {
		return k, nil
	}
	use := c.kernelUse(B, T)
	if use.heads {
		if err := k.addHeads(c, B, T); err != nil {
			k.Free()
			return kernels{}, err
		}
	}
	if use.norm {
		if err := k.addNorm(c, B*T); err != nil {
			k.Free()
			return kernels{}, err
		}
	}
	return k, nil
}

// Free releases the closures. The kernel definitions stay with them:
// a backward pass traced from this forward pass calls them after it
// returns, so they are released by the garbage collector once the graph
// that holds the closures is gone.
func (k kernels) Free() {
	k.heads.Free()
	k.norm.Free()
	k.normRes.Free()
}

func define(name string, inputs, outputs []string, source string) (*mlx.CUDAKernel, error) {
	d, err := mlx.NewCUDAKernel(name, inputs, outputs, source, "")
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	return d, nil
}

// threads rounds n up to whole blocks of 256 threads.
func threads(n int) int { return (n + 255) / 256 * 256 }

// floatBits is f's bit pattern as a template argument.
func floatBits(f float32) int { return int(int32(math.Float32bits(f))) }

// addHeads defines the attention-heads operation for B×T positions.
func (k *kernels) addHeads(c Config, B, T int) error {
	fwd, err := define("ptlm_heads_fwd", []string{"qkv"}, []string{"q", "k", "v"}, headsFwdSource)
	if err != nil {
		return err
	}
	bwd, err := define("ptlm_heads_bwd", []string{"dq", "dk", "dv"}, []string{"dqkv"}, headsBwdSource)
	if err != nil {
		return err
	}
	hd, hq, hkv, R := c.HeadDim(), c.Heads, c.KVHeadCount(), B*T
	rotate := 0
	if !c.learnedPositions() {
		rotate = 1
	}
	tmpl := []mlx.KernelArg{
		{Name: "R", Value: R}, {Name: "T", Value: T}, {Name: "HD", Value: hd}, {Name: "HQ", Value: hq}, {Name: "HKV", Value: hkv},
		{Name: "ROTATE", Value: rotate}, {Name: "OFFSET", Value: 0},
		{Name: "LOG2BASE_BITS", Value: floatBits(float32(math.Log2(c.RoPEBase)))}, {Name: "SCALE_BITS", Value: floatBits(c.ropeScale())},
	}
	grid := [3]int{threads(R * (hq + 2*hkv) * hd / 2), 1, 1}
	block := [3]int{256, 1, 1}
	k.heads, err = mlx.CustomVJP(func(in []*mlx.Array) ([]*mlx.Array, error) {
		dt := in[0].Dtype()
		return fwd.Apply(in, mlx.KernelLaunch{
			OutputShapes: [][]int{{B, hq, T, hd}, {B, hkv, T, hd}, {B, hkv, T, hd}},
			OutputDtypes: []mlx.Dtype{dt, dt, dt}, Grid: grid, Block: block, Template: tmpl,
		})
	}, func(primals, cotangents, _ []*mlx.Array) ([]*mlx.Array, error) {
		return bwd.Apply(cotangents, mlx.KernelLaunch{
			OutputShapes: [][]int{primals[0].Shape()}, OutputDtypes: []mlx.Dtype{primals[0].Dtype()},
			Grid: grid, Block: block, Template: tmpl,
		})
	})
	if err != nil {
		return fmt.Errorf("model: heads kernel: %w", err)
	}
	return nil
}

// addNorm defines RMSNorm as the kernels' forward and backward passes for
// rows of R, plain (k.norm) and passing its input through (k.normRes).
func (k *kernels) addNorm(c Config, R int) error {
	fwd, err := define("ptlm_rms_norm_fwd", []string{"x", "w"}, []string{"y"}, normFwdSource)
	if err != nil {
		return err
	}
	bwd, err := define("ptlm_rms_norm_bwd", []string{"x", "w", "dy", "dr"}, []string{"dx", "part"}, normBwdSource)
	if err != nil {
		return err
	}
	sum, err := define("ptlm_rms_gain_sum", []string{"part"}, []string{"dw"}, normGainSumSource)
	if err != nil {
		return err
	}
	D, eps := c.DModel, float32(c.NormEps)
	// About 512 blocks of rows, two rows per warp for 8,192 rows: enough
	// warps that their loads overlap rather than a warp waiting on row
	// after row, and few enough partial sums for normGainSum.
	rb := ((R+511)/512 + 7) / 8 * 8
	nb := (R + rb - 1) / rb
	sumTmpl := []mlx.KernelArg{{Name: "D", Value: D}, {Name: "NB", Value: nb}}
	block := [3]int{256, 1, 1}
	fwdTmpl := []mlx.KernelArg{{Name: "R", Value: R}, {Name: "D", Value: D}, {Name: "EPS_BITS", Value: floatBits(eps)}}
	forward := func(x, w *mlx.Array) (*mlx.Array, error) {
		out, err := fwd.Apply([]*mlx.Array{x, w}, mlx.KernelLaunch{
			OutputShapes: [][]int{x.Shape()}, OutputDtypes: []mlx.Dtype{x.Dtype()},
			Grid: [3]int{(R + 7) / 8 * 256, 1, 1}, Block: block, Template: fwdTmpl, // a warp per row
		})
		if err != nil {
			return nil, err
		}
		return out[0], nil
	}
	// backward returns dx and dw for cotangent dy, adding the residual's
	// gradient dr to dx (nil for none: the kernel then reads dy in its
	// place and ignores it).
	backward := func(x, w, dy, dr *mlx.Array) ([]*mlx.Array, error) {
		res := 1
		if dr == nil {
			dr, res = dy, 0
		}
		tmpl := []mlx.KernelArg{{Name: "R", Value: R}, {Name: "D", Value: D}, {Name: "RB", Value: rb},
			{Name: "EPS_BITS", Value: floatBits(eps)}, {Name: "RES", Value: res}}
		out, err := bwd.Apply([]*mlx.Array{x, w, dy, dr}, mlx.KernelLaunch{
			OutputShapes: [][]int{x.Shape(), {nb, D}}, OutputDtypes: []mlx.Dtype{x.Dtype(), mlx.Float32},
			Grid: [3]int{nb * 256, 1, 1}, Block: block, Template: tmpl,
		})
		if err != nil {
			return nil, err
		}
		dw, err := sum.Apply(out[1:], mlx.KernelLaunch{
			OutputShapes: [][]int{{D}}, OutputDtypes: []mlx.Dtype{w.Dtype()},
			Grid: [3]int{(D + 31) / 32 * 256, 1, 1}, Block: block, Template: sumTmpl,
		})
		if err != nil {
			return nil, err
		}
		return []*mlx.Array{out[0], dw[0]}, nil
	}
	k.norm, err = mlx.CustomVJP(func(in []*mlx.Array) ([]*mlx.Array, error) {
		y, err := forward(in[0], in[1])
		return []*mlx.Array{y}, err
	}, func(primals, cotangents, _ []*mlx.Array) ([]*mlx.Array, error) {
		return backward(primals[0], primals[1], cotangents[0], nil)
	})
	if err != nil {
		return fmt.Errorf("model: rms norm kernel: %w", err)
	}
	k.normRes, err = mlx.CustomVJP(func(in []*mlx.Array) ([]*mlx.Array, error) {
		y, err := forward(in[0], in[1])
		return []*mlx.Array{y, in[0]}, err
	}, func(primals, cotangents, _ []*mlx.Array) ([]*mlx.Array, error) {
		return backward(primals[0], primals[1], cotangents[0], cotangents[1])
	})
	if err != nil {
		return fmt.Errorf("model: rms norm kernel: %w", err)
	}
	return nil
}

// useHeads reports whether the heads kernel takes the projection of rows x.
func (k kernels) useHeads(x *mlx.Array) bool {
	return k.heads != nil && x.Ndim() == 2 && x.Dim(0) == k.rows
}

// useNorm reports whether the norm kernel takes rows x.
func (k kernels) useNorm(x *mlx.Array) bool {
	return k.norm != nil && x.Ndim() == 2 && x.Dim(0) == k.rows && x.Dim(1) == k.dim
}

// applyHeads returns q, k, v [B, h, T, hd] of the projection rows qkv.
func (k kernels) applyHeads(qkv *mlx.Array) (q, kk, v *mlx.Array) {
	out, err := k.heads.Call(qkv)
	if err != nil {
		e := mlx.ErrorArray(fmt.Errorf("model: heads kernel: %w", err))
		return e, e, e
	}
	return out[0], out[1], out[2]
}

// applyNorm returns RMSNorm(x)·w for rows x [R, D].
func (k kernels) applyNorm(x, w *mlx.Array) *mlx.Array {
	out, err := k.norm.Call(x, w)
	if err != nil {
		return mlx.ErrorArray(fmt.Errorf("model: rms norm kernel: %w", err))
	}
	return out[0]
}

// applyNormRes returns RMSNorm(x)·w for rows x [R, D], and x passed
// through for the residual connection around the block the norm feeds.
func (k kernels) applyNormRes(x, w *mlx.Array) (normed, res *mlx.Array) {
	out, err := k.normRes.Call(x, w)
	if err != nil {
		e := mlx.ErrorArray(fmt.Errorf("model: rms norm kernel: %w", err))
		return e, e
	}
	return out[0], out[1]
}
