package pretrain

import (
	"fmt"

	"github.com/posttrainllm/posttrainllm/data"
)

// Dataset is a tokenised corpus split into training and held-out views.
type Dataset struct {
	// Corpus is the text the tokens came from; nil for token shards.
	Corpus    *data.Corpus
	Tokenizer data.Tokenizer
	Tokens    *data.Tokens
	// ValTokens holds the held-out shards when they are files of their
	// own (OpenShardDataset); nil when Val is a part of Tokens.
	ValTokens  *data.Tokens
	Train, Val data.View
}

// OpenDataset loads the corpus at path ("" for the default corpus),
// tokenises it once into the token cache under cacheDir ("" for the default
// cache directory), and splits off the last valFraction for evaluation.
// Both parts must hold at least context+1 tokens.
func OpenDataset(path, tokenizer, cacheDir string, context int, valFraction float64) (*Dataset, error) {
	tok, err := data.NewTokenizer(tokenizer)
	if err != nil {
		return nil, err
	}
	return OpenDatasetWith(path, tok, cacheDir, context, valFraction)
}

// OpenDatasetWith is OpenDataset with a tokenizer built by the caller, such
// as a run's tokenizer.json (train.OpenTokenizer).
func OpenDatasetWith(path string, tok data.Tokenizer, cacheDir string, context int, valFraction float64) (*Dataset, error) {
	corpus, tokens, err := OpenTokens(path, tok, cacheDir)
	if err != nil {
		return nil, err
	}
	trainView, valView, err := data.Split(tokens, valFraction, context)
	if err != nil {
		tokens.Close()
		return nil, fmt.Errorf("corpus %s: %w", CorpusName(path), err)
	}
	return &Dataset{Corpus: corpus, Tokenizer: tok, Tokens: tokens, Train: trainView, Val: valView}, nil
}

// OpenTokens loads the corpus at path ("" for the default corpus) and
// tokenises it once into the token cache under cacheDir ("" for the
// default cache directory).
func OpenTokens(path string, tok data.Tokenizer, cacheDir string) (*data.Corpus, *data.Tokens, error) {
	var corpus *data.Corpus
	var err error
	if path == "" {
		corpus, err = data.LoadDefaultCorpus()
	} else {
		corpus, err = data.LoadCorpus(path)
	}
	if err != nil {
		return nil, nil, err
	}
	if cacheDir == "" {
		if cacheDir, err = data.DefaultCacheDir(); err != nil {
			return nil, nil, err
		}
	}
	tokens, err := data.OpenTokens(corpus, tok, cacheDir)
	if err != nil {
		return nil, nil, err
	}
	return corpus, tokens, nil
}

// CorpusName names the corpus at path for messages: path, or the default
// corpus for "".
func CorpusName(path string) string {
	if path == "" {
		return "(default: Go standard library sources)"
	}
	return path
}

// Close unmaps the token files.
func (d *Dataset) Close() error { return d.closeTokens() }
