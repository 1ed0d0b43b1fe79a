package main

import (
	"fmt"
	"io"
	"path/filepath"

	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/pretrain"
	"github.com/posttrainllm/posttrainllm/train"
)

// openShardDataset maps the token shards cfg.Data names, saying which
// shards train and which are held out.
func openShardDataset(w io.Writer, cfg train.Config, tok data.Tokenizer) (*pretrain.Dataset, error) {
	ds, err := pretrain.OpenConfigDatasetWith(cfg, tok, "")
	if err != nil {
		return nil, fmt.Errorf("token shards %s: %w", cfg.Data, err)
	}
	held := "the last shard"
	switch {
	case cfg.ValData != "":
		held = cfg.ValData
	case len(ds.Tokens.Parts()) == 1 && ds.ValTokens == nil:
		held = fmt.Sprintf("the last %g of the only shard", cfg.ValFraction)
	}
	fmt.Fprintf(w, "data: %s (%d training shards, memory-mapped), held out: %s\n", cfg.Data, len(ds.Tokens.Parts()), held)
	fmt.Fprintf(w, "tokens: %d for training, %d held out (%s tokenizer)\n", ds.Train.Len(), ds.Val.Len(), tok.Name())
	return ds, nil
}

// resolveShards checks that --data and --val-data match token shards and
// makes them absolute, so a checkpoint's config names them from any
// working directory.
func resolveShards(ov *overrides) error {
	for _, name := range []string{"data", "val-data"} {
		if !ov.isChanged(name) || ov.value(name) == "" {
			continue
		}
		v := ov.value(name)
		if _, err := data.ShardPaths(v); err != nil {
			return usageError("invalid --%s %s: %v", name, v, err)
		}
		abs, err := filepath.Abs(v)
		if err != nil {
			return usageError("invalid --%s %s: %v", name, v, err)
		}
		if err := ov.fs.Set(name, abs); err != nil {
			return err
		}
	}
	return nil
}
