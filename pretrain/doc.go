// Package pretrain trains a model from scratch (or resumes it) on a token
// corpus: the Trainer (New, Trainer.Run), a train.Task over package
// train's loop (train.RunLoop) that feeds windows of the corpus to the
// model's step, from the host or gathered on the device; the corpus
// datasets it reads (Dataset: OpenDataset for a text corpus through the
// token cache, OpenShardDataset for llm.c token shards, OpenConfigDataset
// for what a train.Config names); the sampled held-out evaluation of the
// corpus's validation windows (Evaluator); and the refreshes two
// optimizers need beside the step (GaLoreRefresher, SophiaEstimator).
//
// Like package train's, its entry points that build or evaluate arrays
// (Trainer.Run, the Evaluator, the refreshers) run their work on the MLX
// thread with mlx.Do and may be called from any goroutine.
package pretrain
