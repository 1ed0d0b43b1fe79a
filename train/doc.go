// Package train is what every training run shares: the loop (RunLoop)
// that runs a Task, with its hooks, set-up, the micro-batch plan and
// memory budget, schedules, held-out evaluation, metrics sinks, divergence
// checks, checkpoints, resume and keep-best/patience; and the optimizers'
// glue (NewOptimizer, with GaLore's and Sophia's settings). Pretraining,
// the Trainer that runs the loop over windows of a token corpus, is
// package pretrain's; fine-tuning is package finetune's, a Task of its
// own over the same loop; opening and running a run folder (sampling,
// chat, import, fuse) is package runfolder's. The compiled update and the
// state it carries are package step's.
//
// MLX keeps per-thread state, so the package's entry points that build or
// evaluate arrays (RunLoop, NewSetup, EvaluateView, checkpoints) run
// their work on the MLX thread with mlx.Do and may be called from any
// goroutine.
package train
