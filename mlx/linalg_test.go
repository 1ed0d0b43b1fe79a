package mlx

import (
	"strings"
	"testing"
)

func TestSVDReconstructs(t *testing.T) {
	onMLX(t, func() {
		v := lcg(3, 12)
		a := f32(v, 3, 4)
		u, s, vt := SVD(a)
		checkShape(t, "u", u, 3, 3)
		checkShape(t, "s", s, 3)
		checkShape(t, "vt", vt, 4, 4)
		sv := values(t, s)
		for i := 1; i < len(sv); i++ {
			if sv[i] > sv[i-1] {
				t.Fatalf("singular values %v are not in descending order", sv)
			}
		}
		// u[:, :3] · diag(s) · vt[:3, :] = a
		us := Multiply(u, Reshape(s, 1, 3))
		back := Matmul(us, Slice(vt, []int{0, 0}, []int{3, 4}))
		checkClose(t, "u·diag(s)·vt", back, []int{3, 4}, v, 1e-5)
		// u is orthogonal.
		eye := []float64{1, 0, 0, 0, 1, 0, 0, 0, 1}
		checkClose(t, "uᵀu", Matmul(Transpose(u), u), []int{3, 3}, eye, 1e-5)
		_, _, bad := SVD(f32([]float64{1, 2, 3}, 3))
		if err := bad.Err(); err == nil || !strings.Contains(err.Error(), "svd") {
			t.Fatalf("SVD of a 1-D array: err = %v, want an svd error", err)
		}
	})
}
