// Package finetune fine-tunes a checkpoint on jsonl records: the
// FineTuner (New, NewWithObjective) and its Config (finetune.json), the
// Objective interface and its registry (NewObjective), SFT
// (SupervisedObjective), the preference objectives (DPO, IPO, ORPO,
// SimPO: PreferenceObjective, with their losses and the reference
// model's log-probabilities), GRPO (GRPOObjective, online with rewards),
// LoRA/DoRA adapters and quantized bases. A fine-tune is a train.Task: it
// runs package train's loop (train.RunLoop), with its logging, metrics,
// hooks, micro-batch plan, checkpoints, resume and data parallelism.
//
// Like package train's, its entry points that build or evaluate arrays
// (FineTuner.Run, the PairEvaluator) run their work on the MLX thread
// with mlx.Do and may be called from any goroutine.
package finetune
