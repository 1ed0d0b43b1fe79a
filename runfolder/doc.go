// Package runfolder opens and runs the model of a run folder (or of one
// of its checkpoints): sampling (SampleCheckpoint, Generate), the model
// a chat or server generates with (OpenGenerator), a fine-tune's adapters
// applied to its base (LoadAdapted, SampleAdapted) or merged into it
// (Fuse), the cross-entropy of a checkpoint (EvaluateCheckpoint), and
// run folders made from Hugging Face folders and GGUF files (ImportHF,
// ImportGGUF, ExportHF). It sits above packages train and finetune,
// whose checkpoints and finetune.json it reads.
//
// Its entry points run their MLX work on the MLX thread with mlx.Do and
// may be called from any goroutine.
package runfolder
