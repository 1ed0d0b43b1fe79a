package main

import (
	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/data/hftokenizer"
	"github.com/posttrainllm/posttrainllm/train"
)

// openTokenizer is the command line's train.TokenizerOpener: the hf
// tokenizer is the run's tokenizer.json (train.HFTokenizerPath), read with
// data/hftokenizer; the other names are data.NewTokenizer's.
func openTokenizer(name, runDir string) (data.Tokenizer, error) {
	if name == train.HFTokenizer {
		return hftokenizer.Load(train.HFTokenizerPath(runDir))
	}
	return data.NewTokenizer(name)
}

// runTokenizer opens the tokenizer cfg names for the run folder runDir,
// where an hf tokenizer's files are.
func runTokenizer(cfg train.Config, runDir string) (data.Tokenizer, error) {
	return train.OpenTokenizer(openTokenizer, cfg.Tokenizer, runDir)
}
