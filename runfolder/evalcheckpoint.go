package runfolder

import (
	"fmt"
	"path/filepath"

	"github.com/posttrainllm/posttrainllm/checkpoint"
	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/pretrain"
	"github.com/posttrainllm/posttrainllm/train"
)

// The splits EvaluateCheckpoint can evaluate.
const (
	SplitVal   = "val"   // the held-out tail of the token stream, as training holds it out
	SplitTrain = "train" // the tokens before it
	SplitAll   = "all"   // every token
)

// EvalOptions say what EvaluateCheckpoint measures.
type EvalOptions struct {
	// Corpus is a text file or directory to evaluate on, tokenised with the
	// checkpoint's tokenizer; "" evaluates on the corpus the run trained on.
	Corpus string
	// Split is SplitVal, SplitTrain or SplitAll, cut with the run's
	// val_fraction. "" means SplitVal for the run's corpus and SplitAll for
	// Corpus.
	Split string
	// Batch is the number of windows evaluated at once; 0 takes the run's
	// batch.
	Batch int
	// EvalTokens, when above 0, evaluates that many tokens (rounded up to
	// whole batches) in windows drawn at random starts, as training's
	// held-out evaluations draw them, instead of every token once.
	EvalTokens int
	// Seed seeds those random windows; nil takes the seed training's
	// evaluations use, the run's seed + 1, which draws the windows training
	// evaluated on.
	Seed *uint64
	// Device is "cpu" or "gpu".
	Device string
	// TokenCache is the token cache directory; "" for the default.
	TokenCache string
	// Tokenizers builds the checkpoint's tokenizer when its config names
	// one package data does not know (train.HFTokenizer); nil for
	// data.NewTokenizer.
	Tokenizers train.TokenizerOpener
}

// CheckpointEval is what EvaluateCheckpoint measured, and on what.
type CheckpointEval struct {
	train.EvalResult
	Checkpoint string  // the checkpoint directory
	Step       int     // its optimizer updates
	Corpus     string  // the corpus evaluated: a path, or "" for the default corpus
	Tokenizer  string  // the checkpoint's tokenizer
	Split      string  // SplitVal, SplitTrain or SplitAll
	SplitLen   int     // tokens in the split
	Windows    int     // windows of Context tokens evaluated
	Context    int     // the model's context
	Sampled    bool    // random windows (EvalOptions.EvalTokens) rather than every token
	Seed       uint64  // the sampler's seed, when Sampled
	ZLoss      float64 // the model's z-loss coefficient
}

// ZLossTerm is the z-loss term training adds to the cross-entropy:
// ZLoss × LSESquared (0 for a model without z-loss).
func (c CheckpointEval) ZLossTerm() float64 { return c.ZLoss * c.LSESquared }

// EvaluateCheckpoint measures the cross-entropy of a checkpoint, path being
// a run folder or a checkpoint directory (checkpoint.Resolve), on a split of
// its run's corpus or of another corpus. By default it evaluates every
// token of the split once (train.EvaluateView); with opts.EvalTokens it draws
// random windows as training's evaluations do (pretrain.Evaluator).
func EvaluateCheckpoint(path string, opts EvalOptions) (CheckpointEval, error) {
	var out CheckpointEval
	if opts.Batch < 0 || opts.EvalTokens < 0 {
		return out, fmt.Errorf("eval: batch %d, eval tokens %d; want >= 0 (0 for the default)", opts.Batch, opts.EvalTokens)
	}
	split := opts.Split
	if split == "" {
		split = SplitVal
		if opts.Corpus != "" {
			split = SplitAll
		}
	}
	if split != SplitVal && split != SplitTrain && split != SplitAll {
		return out, fmt.Errorf("eval: split %q, want %s, %s or %s", split, SplitVal, SplitTrain, SplitAll)
	}
	dir, err := checkpoint.Resolve(path)
	if err != nil {
		return out, err
	}
	st, err := train.ReadRunState(filepath.Join(dir, checkpoint.StateFile))
	if err != nil {
		return out, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	cfg := st.Config
	corpus := opts.Corpus
	if corpus == "" {
		corpus = cfg.Corpus
	}
	out = CheckpointEval{Checkpoint: dir, Step: st.Step, Corpus: corpus, Tokenizer: cfg.Tokenizer, Split: split,
		Context: cfg.Model.Context, ZLoss: cfg.Model.ZLoss}
	tok, err := train.OpenRunTokenizer(opts.Tokenizers, cfg, checkpoint.RunDirOf(dir))
	if err != nil {
		return out, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	var view data.View
	if opts.Corpus == "" && cfg.Data != "" {
		ds, err := pretrain.OpenConfigDatasetWith(cfg, tok, "")
		if err != nil {
			return out, fmt.Errorf("the run's token shards %s: %w", cfg.Data, err)
		}
		defer ds.Close()
		out.Corpus = cfg.Data
		if split == SplitVal && cfg.ValData != "" {
			out.Corpus = cfg.ValData
		}
		view = ds.Val
		switch split {
		case SplitTrain:
			view = ds.Train
		case SplitAll:
			if ds.ValTokens == nil {
				view = ds.Tokens.All()
				break
			}
			return out, fmt.Errorf("eval: split %s of token shards: the training and held-out shards are separate files; want %s or %s", split, SplitVal, SplitTrain)
		}
	} else {
		_, tokens, err := pretrain.OpenTokens(corpus, tok, opts.TokenCache)
		if err != nil {
			if opts.Corpus == "" {
				return out, fmt.Errorf("the run's corpus %s: %w", pretrain.CorpusName(corpus), err)
			}
			return out, fmt.Errorf("corpus %s: %w", pretrain.CorpusName(corpus), err)
		}
		defer tokens.Close()
		view = tokens.All()
		if split != SplitAll {
			trainView, valView, err := data.Split(tokens, cfg.ValFraction, cfg.Model.Context)
			if err != nil {
				return out, fmt.Errorf("corpus %s: %w", pretrain.CorpusName(corpus), err)
			}
			view = valView
			if split == SplitTrain {
				view = trainView
			}
		}
	}
	out.SplitLen = view.Len()
	batch := opts.Batch
	if batch == 0 {
		batch = cfg.Batch
	}
	err = mlx.Do(func() error {
		if err := mlx.UseDevice(opts.Device); err != nil {
			return err
		}
		_, m, params, free, err := loadModel(dir)
		if err != nil {
			return err
		}
		defer free()
		if opts.EvalTokens == 0 {
			out.EvalResult, err = train.EvaluateView(m, params, view, batch)
			_, _, out.Windows = train.EvalShape(m.Config.Context, out.Tokens, batch)
			return err
		}
		out.Sampled, out.Seed = true, cfg.Seed+1
		if opts.Seed != nil {
			out.Seed = *opts.Seed
		}
		e, err := pretrain.NewEvaluator(m.LossTerms, view, batch, m.Config.Context, opts.EvalTokens, out.Seed, true)
		if err != nil {
			return err
		}
		defer e.Free()
		out.EvalResult, err = e.Evaluate(params)
		out.Windows = e.Tokens() / m.Config.Context
		return err
	})
	return out, err
}
