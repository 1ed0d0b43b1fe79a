package step

import (
	"fmt"
	"hash/fnv"
	"math"
	"strings"

	"github.com/posttrainllm/posttrainllm/mlx"
)

// A microbatch's gradients arrive one array per unit (a parameter, or the
// parameters a unit stacks); the flat layout sums them per group in
// float32. Through MLX's operations each group costs a copy kernel per
// unit (the concatenation), then one kernel for the cast to float32 and,
// after the first microbatch, the addition to the sums. On a CUDA GPU
// groupGradCopy does all of it in one kernel per group: each thread
// finds the unit its element of the group lies in, reads the element in
// the compute dtype, and writes it in float32, added to the sums of the
// microbatches before. The numbers are the same to the bit (one cast and
// one float32 addition per element either way; TestGPUGroupGradsMatchMLXOps).

// groupGrads returns the float32 gradient sums of each flat group after
// one more microbatch: the units' gradients grads (in group order, in
// their compute dtype) flattened and concatenated per group, cast to
// float32 and added to acc (the sums so far, one per group; nil for the
// first microbatch). With kernels, a group of several units runs as one
// CUDA kernel (groupGradCopy); otherwise through MLX's operations.
func (s *Step) groupGrads(grads, acc []*mlx.Array, kernels bool) ([]*mlx.Array, error) {
	out := make([]*mlx.Array, 0, s.flat.Groups())
	var parts []*mlx.Array
	for u, g := range grads {
		parts = append(parts, g)
		if u+1 < len(grads) && s.flat.GroupOf(s.units[u+1][0]) == s.flat.GroupOf(s.units[u][0]) {
			continue
		}
		var sum *mlx.Array
		if acc != nil {
			sum = acc[len(out)]
		}
		if kernels && len(parts) > 1 {
			g, err := groupGradCopy(parts, sum)
			if err != nil {
				return nil, err
			}
			out = append(out, g)
		} else {
			out = append(out, groupGradOps(parts, sum))
		}
		parts = nil
	}
	return out, nil
}

// groupGradOps is one group's float32 gradient sum through MLX's
// operations: the parts flattened and concatenated in their own dtype,
// then one cast to float32 per group, where casting each part would
// launch a kernel per parameter, added to sum unless it is nil. The
// group's gradient is an array of its own, not a slice of one: MLX may
// hand an input's whole buffer to an output (donation), and a slice's
// output would then keep the whole buffer.
func groupGradOps(parts []*mlx.Array, sum *mlx.Array) *mlx.Array {
	flat := make([]*mlx.Array, len(parts))
	for i, p := range parts {
		flat[i] = mlx.Reshape(p, -1)
	}
	g := flat[0]
	if len(flat) > 1 {
		g = mlx.Concatenate(flat, 0)
	}
	g = mlx.AsType(g, mlx.Float32)
	if sum == nil {
		return g
	}
	return mlx.Add(sum, g)
}

// groupGradCopy is groupGradOps as one CUDA kernel: a thread per element
// of the group, which finds its part by a binary search of the parts'
// offsets (in constant memory) and reads it there. Each distinct list of
// part sizes and dtype is a kernel of its own, compiled once per process;
// its name is a hash of its source, so that a name always comes with the
// same source in MLX's cache.
func groupGradCopy(parts []*mlx.Array, sum *mlx.Array) (*mlx.Array, error) {
	dtype := parts[0].Dtype()
	offsets := make([]int, len(parts)+1)
	for i, p := range parts {
		if p.Dtype() != dtype {
			return nil, fmt.Errorf("step: group gradient kernel: part %d is %v, part 0 %v; a group holds one dtype", i, p.Dtype(), dtype)
		}
		offsets[i+1] = offsets[i] + p.Size()
	}
	size := offsets[len(parts)]
	if size >= math.MaxInt32-256 {
		return groupGradOps(parts, sum), nil // the kernel indexes its threads with 32 bits
	}
	header, source := groupGradSource(offsets, dtype, sum != nil)
	h := fnv.New64a()
	h.Write([]byte(header))
	h.Write([]byte(source))
	name := fmt.Sprintf("ptlm_group_grad_%016x", h.Sum64())
	inputs := make([]string, len(parts), len(parts)+1)
	in := make([]*mlx.Array, len(parts), len(parts)+1)
	for i, p := range parts {
		inputs[i] = fmt.Sprintf("g%d", i)
		in[i] = p
	}
	if sum != nil {
		inputs, in = append(inputs, "acc"), append(in, sum)
	}
	k, err := mlx.NewCUDAKernel(name, inputs, []string{"out"}, source, header)
	if err != nil {
		return nil, fmt.Errorf("step: group gradient kernel: %w", err)
	}
	defer k.Free() // the launched operation holds its own source
	out, err := k.Apply(in, mlx.KernelLaunch{
		OutputShapes: [][]int{{size}}, OutputDtypes: []mlx.Dtype{mlx.Float32},
		Grid: [3]int{(size + 255) / 256 * 256, 1, 1}, Block: [3]int{256, 1, 1},
	})
	if err != nil {
		return nil, fmt.Errorf("step: group gradient kernel: %w", err)
	}
	return out[0], nil
}

// groupGradSource is groupGradCopy's header (the parts' offsets, the
// last one the group's size) and body, for parts of dtype, adding the
// input acc where withSum.
func groupGradSource(offsets []int, dtype mlx.Dtype, withSum bool) (header, source string) {
	n := len(offsets) - 1
	var b strings.Builder
	fmt.Fprintf(&b, "// the parts' offsets in a group of %v gradients\n", dtype)
	b.WriteString("__constant__ int ptlm_group_offsets[] = {")
	for i, o := range offsets {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprint(&b, o)
	}
	b.WriteString("};\n")
	header = b.String()

	b.Reset()
	fmt.Fprintf(&b, `
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= %d) return;
  int lo = 0, hi = %d;
  while (hi - lo > 1) {
    const int mid = (lo + hi) >> 1;
    if (ptlm_group_offsets[mid] <= i) lo = mid; else hi = mid;
  }
  const int j = i - ptlm_group_offsets[lo];
  float v = 0.f;
  switch (lo) {
`, offsets[n], n)
	for p := 0; p < n; p++ {
		fmt.Fprintf(&b, "  case %d: v = static_cast<float>(g%d[j]); break;\n", p, p)
	}
	b.WriteString("  }\n")
	if withSum {
		b.WriteString("  out[i] = acc[i] + v;\n")
	} else {
		b.WriteString("  out[i] = v;\n")
	}
	return header, b.String()
}
