package mlx

/*
#include "bridge_linalg.h"
*/
import "C"

// SVD returns u, s and vt with a = u · diag(s) · vt for a 2-D float32
// array a of shape [m, n]: u is [m, m], s is [min(m, n)] in descending
// order and vt is [n, n]. It runs on the CPU stream whatever the default
// device, because MLX has no SVD on the GPU; keep it out of compiled
// functions that run on a GPU.
func SVD(a *Array) (u, s, vt *Array) {
	if err := firstErr(a); err != nil {
		out := errArrays(3, err)
		return out[0], out[1], out[2]
	}
	var hs []C.ptlm_array
	onThread, err := call(func() C.int {
		var v C.ptlm_vec
		if rc := C.ptlm_svd_cpu(a.h, &v); rc != C.PTLM_OK {
			return rc
		}
		return takeVec(v, &hs)
	})
	if err != nil {
		out := errArrays(3, opError("svd", err, a))
		return out[0], out[1], out[2]
	}
	out := newArrays(hs, onThread)
	return out[0], out[1], out[2]
}
