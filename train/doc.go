// Package train is the training loop every kind of run shares: a
// Trainer pretraining a model on a token corpus and a FineTuner
// fine-tuning a checkpoint with an Objective (SFT, the preference
// objectives, or one of one's own) both run it, with their set-up, the
// micro-batch plan, schedules, held-out evaluation, metrics sinks, hooks,
// divergence checks, checkpoints and resume. The compiled update and the
// state it carries are package step's.
//
// MLX keeps per-thread state, so the package's entry points that build or
// evaluate arrays (Trainer.Run, FineTuner.Run, the Evaluator, checkpoints,
// sampling) run their work on the MLX thread with mlx.Do and may be called
// from any goroutine.
package train
