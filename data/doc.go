// Package data turns text on disk into the token batches a training loop
// consumes.
//
// The pipeline is:
//
//   - [LoadCorpus] collects the text files of a file or directory into a
//     [Corpus] with a content hash, and [LoadDefaultCorpus] does the same for
//     the Go standard library sources under GOROOT;
//   - a [Tokenizer] ([NewTokenizer]: "byte" or "gpt2") maps text to token ids;
//   - [OpenTokens] tokenizes a corpus once into a cached, checksummed token
//     file and memory-maps it as [Tokens];
//   - [OpenShards] memory-maps llm.c/modded-nanogpt .bin token shards
//     ([ShardPaths] of a directory or glob) as one [Tokens], and
//     [ShardWriter] writes them;
//   - [Split] cuts the tokens into train and validation [View]s;
//   - a [Sampler] draws seeded random context windows from a view,
//     re-tokenised with GPT-2 [BPEDropout] when set, and a
//     [Prefetcher] fills [Batch]es ahead of the trainer on one goroutine.
//
// The package is pure Go: it produces int32 slices and leaves turning them
// into device arrays to the caller.
package data
