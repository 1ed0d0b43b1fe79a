package mlx

import "runtime"

// owned is a C handle a Go object owns: release frees it at once, and if
// the owner becomes unreachable first, a cleanup frees it on the MLX
// thread (releaseLater). The zero owned holds nothing.
type owned[H comparable] struct {
	h       H
	free    func(H)
	cleanup runtime.Cleanup
}

// own makes owner, the object o belongs to, hold h, which free releases.
func own[T any, H comparable](owner *T, o *owned[H], h H, free func(H)) {
	o.h, o.free = h, free
	o.cleanup = runtime.AddCleanup(owner, func(h H) { releaseLater(func() { free(h) }) }, h)
}

// release frees the handle; later calls do nothing.
func (o *owned[H]) release() {
	var none H
	if o.h == none {
		return
	}
	o.cleanup.Stop()
	o.free(o.h)
	o.h = none
}
