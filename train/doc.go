// Package train is what every training run shares: the loop (RunLoop)
// that runs a Task, with its hooks, set-up, the micro-batch plan and
// memory budget, schedules, held-out evaluation, metrics sinks, divergence
// checks, checkpoints, resume and keep-best/patience; the optimizers'
// glue (GaLore's and Sophia's refreshes); and pretraining, the Trainer,
// which runs the loop over windows of a token corpus. Fine-tuning is
// package finetune's, a Task of its own over the same loop; opening and
// running a run folder (sampling, chat, import, fuse) is package
// runfolder's. The compiled update and the state it carries are package
// step's.
//
// MLX keeps per-thread state, so the package's entry points that build or
// evaluate arrays (Trainer.Run, RunLoop, the Evaluator, checkpoints) run
// their work on the MLX thread with mlx.Do and may be called from any
// goroutine.
package train
