// Package step is the compiled optimizer update: one MLX function of the
// parameters, the frozen arrays, the optimizer state, the learning rate
// and an update's batch (Step, built by NewStep from a Loss and a Layout),
// with accumulation over a fixed number of microbatches, gradient
// clipping, data-parallel averaging and the flat parameter groups of an
// elementwise optimizer traced inside it; and the State that carries the
// arrays from one update to the next, releasing what each update
// replaces. A loop of one's own needs model, optim, data and this package
// alone; package train's loop runs every kind of run on it.
//
// MLX keeps per-thread state, so the entry points that build or evaluate
// arrays (NewStep, Step's Run methods, State's methods) run their work on
// the MLX thread with mlx.Do and may be called from any goroutine.
package step
