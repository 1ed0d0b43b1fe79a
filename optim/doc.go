// Package optim holds posttrainllm's optimizers, gradient clipping and
// learning-rate schedules.
//
// Every optimizer is functional: its state is a flat, ordered list of
// arrays (Init, StateNames) and Update maps (params, grads, state, lr) to
// (new params, new state) without reading anything back to the host, so a
// whole training step — forward, backward, clipping and update — traces into
// one function compiled with mlx.Compile. The learning rate is a 0-D array
// input of that function, not a captured float, so it follows its schedule
// without retracing; the update counter used for bias correction lives in the
// state as a 0-D int32 array updated in the graph.
//
// Updates are computed in float32 and cast back to each parameter's dtype
// (bfloat16 parameters stay bfloat16); optimizer state is float32.
//
// Elementwise optimizers (AdamW, Lion, SGD) can also run over Flat
// groups: parameters and state concatenated into one 1-D array per dtype
// and decay flag, one update per group instead of per parameter, which is
// how a training step on a GPU runs them.
//
// Schedules run on the host: the trainer evaluates Schedule.LR for the
// 0-based index of the optimizer update (not the microbatch) and writes the
// value into the learning-rate input each step.
package optim
