package pretrain

import (
	"errors"
	"fmt"
	"slices"

	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/train"
)

// OpenConfigDataset opens the training data cfg names: the token shards of
// cfg.Data (OpenShardDataset) or the text corpus cfg.Corpus, tokenised
// through the token cache under cacheDir (OpenDataset).
func OpenConfigDataset(cfg train.Config, cacheDir string) (*Dataset, error) {
	tok, err := data.NewTokenizer(cfg.Tokenizer)
	if err != nil {
		return nil, err
	}
	return OpenConfigDatasetWith(cfg, tok, cacheDir)
}

// OpenConfigDatasetWith is OpenConfigDataset with a tokenizer built by the
// caller, such as a run's tokenizer.json (train.OpenTokenizer).
func OpenConfigDatasetWith(cfg train.Config, tok data.Tokenizer, cacheDir string) (*Dataset, error) {
	if cfg.Data != "" {
		return OpenShardDatasetWith(cfg.Data, cfg.ValData, tok, cfg.Model.Context, cfg.ValFraction)
	}
	return OpenDatasetWith(cfg.Corpus, tok, cacheDir, cfg.Model.Context, cfg.ValFraction)
}

// OpenShardDataset memory-maps the llm.c token shards that pattern names
// (data.ShardPaths: a directory of .bin files or a glob) for training, and
// holds out the shards valPattern names; shards matched by both are
// held out only. With valPattern "" the last shard is held out, or, when
// there is only one, its last valFraction of tokens. Every token must be
// an id of the named tokenizer, which the shards do not record. Both parts
// must hold at least context+1 tokens.
func OpenShardDataset(pattern, valPattern, tokenizer string, context int, valFraction float64) (*Dataset, error) {
	tok, err := data.NewTokenizer(tokenizer)
	if err != nil {
		return nil, err
	}
	return OpenShardDatasetWith(pattern, valPattern, tok, context, valFraction)
}

// OpenShardDatasetWith is OpenShardDataset with a tokenizer built by the
// caller, such as a run's tokenizer.json (train.OpenTokenizer).
func OpenShardDatasetWith(pattern, valPattern string, tok data.Tokenizer, context int, valFraction float64) (*Dataset, error) {
	paths, err := data.ShardPaths(pattern)
	if err != nil {
		return nil, err
	}
	var valPaths []string
	if valPattern != "" {
		if valPaths, err = data.ShardPaths(valPattern); err != nil {
			return nil, err
		}
		paths = slices.DeleteFunc(paths, func(p string) bool { return slices.Contains(valPaths, p) })
		if len(paths) == 0 {
			return nil, fmt.Errorf("token shards %q: every shard is also held out by %q; want training shards besides the held-out ones", pattern, valPattern)
		}
	} else if len(paths) > 1 {
		paths, valPaths = paths[:len(paths)-1], paths[len(paths)-1:]
	}
	tokens, err := data.OpenShards(paths, tok.VocabSize())
	if err != nil {
		return nil, err
	}
	ds := &Dataset{Tokenizer: tok, Tokens: tokens}
	if valPaths == nil {
		ds.Train, ds.Val, err = data.Split(tokens, valFraction, context)
		if err != nil {
			tokens.Close()
			return nil, fmt.Errorf("token shard %s: %w", paths[0], err)
		}
		return ds, nil
	}
	if ds.ValTokens, err = data.OpenShards(valPaths, tok.VocabSize()); err != nil {
		tokens.Close()
		return nil, err
	}
	ds.Train, ds.Val = tokens.All(), ds.ValTokens.All()
	for _, part := range []struct {
		name  string
		view  data.View
		paths []string
	}{{"training", ds.Train, paths}, {"held-out", ds.Val, valPaths}} {
		if part.view.Len() <= context {
			ds.Close()
			return nil, fmt.Errorf("%s shards %v hold %d tokens, want at least context+1 = %d", part.name, part.paths, part.view.Len(), context+1)
		}
	}
	return ds, nil
}

// closeTokens closes the dataset's token files.
func (d *Dataset) closeTokens() error {
	var errs []error
	if d.Tokens != nil {
		errs = append(errs, d.Tokens.Close())
	}
	if d.ValTokens != nil {
		errs = append(errs, d.ValTokens.Close())
	}
	return errors.Join(errs...)
}

// SetBPEDropout makes a training sampler re-tokenise its windows with
// BPE-dropout when cfg asks for it.
func SetBPEDropout(s *data.Sampler, cfg train.Config) error {
	if cfg.BPEDropout == 0 {
		return nil
	}
	b, err := data.NewBPEDropout(cfg.BPEDropout)
	if err != nil {
		return err
	}
	s.SetBPEDropout(b)
	return nil
}
