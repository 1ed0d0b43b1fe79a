package train

import "github.com/posttrainllm/posttrainllm/mlx"

// LimitMemory holds MLX's memory limit (mlx.SetMemoryLimit) at the run's
// memory budget (Config.MemoryBudgetBytes) until the returned restore is
// called, which puts back the limit it replaced.
//
// MLX allocates each operation's output when the host queues it and frees
// the buffers an operation read only once the device has run it. On a GPU
// the host queues a whole update long before the device has computed it,
// so without a limit an update holds nearly every buffer it allocates at
// once, and what shortens the arrays' lives (gradient checkpointing, the
// chunked loss) shows little in the peak. With the limit MLX waits for the
// device to catch up whenever the memory in use passes it, so a step whose
// live arrays fit the budget stays near it. The default budget, 0.8 of the
// device's memory, leaves ordinary runs unthrottled; a smaller one trades
// the host running ahead for memory. A budget of 0 (a fraction of a
// device whose memory MLX does not report) leaves MLX's limit as it is.
func LimitMemory(cfg Config) (restore func(), err error) {
	budget, err := cfg.MemoryBudgetBytes()
	if err != nil || budget == 0 {
		return func() {}, err
	}
	prev := mlx.SetMemoryLimit(budget)
	return func() { mlx.SetMemoryLimit(prev) }, nil
}
