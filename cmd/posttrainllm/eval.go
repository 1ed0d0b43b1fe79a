package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"

	"github.com/spf13/cobra"

	"github.com/posttrainllm/posttrainllm/checkpoint"
	"github.com/posttrainllm/posttrainllm/runfolder"
)

func newEvalCmd() *cobra.Command {
	var (
		from, device string
		opts         runfolder.EvalOptions
		seed         uint64
		asJSON       bool
	)
	cmd := &cobra.Command{
		Use:   "eval",
		Short: "Held-out loss and perplexity of a checkpoint over a whole split or file",
		Long: `eval measures a checkpoint's next-token cross-entropy (the held-out loss,
in nats per token) and perplexity, exp(cross-entropy), over every token of
a split of the run's corpus, or of --corpus FILE tokenised with the run's
tokenizer. The text is cut into consecutive windows of the model's context
(a text shorter than the context is one window of its own length), each
predicting its own next tokens, and evaluated --batch windows at a time (no
more than the text has), so every token after the first is predicted
exactly once. A model
trained with z-loss also gets its z-loss term, reported apart from the
cross-entropy.

` + checkpointRule("--from") + `

--split val is the held-out tail that training evaluates on (the default
for the run's corpus), train the tokens before it, all every token (the
default with --corpus); val and train are cut with the run's val_fraction.

--eval-tokens N instead evaluates N tokens (rounded up to whole batches) in
windows drawn at random starts, as training's held-out evaluations do.
--seed picks the windows; without it they are the windows training
evaluated on, so --eval-tokens set to the run's eval_tokens gives the
val_loss the run logged for that step.`,
		Example: `  posttrainllm eval --from runs/tiny
  posttrainllm eval --from runs/tiny/checkpoints/step-00000200 --split train --json
  posttrainllm eval --from runs/tiny --corpus other.txt
  posttrainllm eval --from runs/tiny --eval-tokens 65536 --seed 7`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if from == "" {
				return usageError("eval needs --from RUN: %s", checkpointPaths)
			}
			if _, err := checkpoint.Resolve(from); err != nil {
				return usageError("invalid --from %s: %v", from, err)
			}
			switch opts.Split {
			case "", runfolder.SplitVal, runfolder.SplitTrain, runfolder.SplitAll:
			default:
				return usageError("invalid --split %s: want %s, %s or %s", opts.Split, runfolder.SplitVal, runfolder.SplitTrain, runfolder.SplitAll)
			}
			if cmd.Flags().Changed("batch") && opts.Batch < 1 {
				return usageError("invalid --batch %d: want >= 1", opts.Batch)
			}
			if cmd.Flags().Changed("eval-tokens") && opts.EvalTokens < 1 {
				return usageError("invalid --eval-tokens %d: want >= 1", opts.EvalTokens)
			}
			if cmd.Flags().Changed("seed") {
				if opts.EvalTokens == 0 {
					return usageError("--seed %d without --eval-tokens: only random windows have a seed; the whole split has none", seed)
				}
				opts.Seed = &seed
			}
			if opts.Corpus != "" {
				if _, err := os.Stat(opts.Corpus); err != nil {
					return usageError("invalid --corpus %s: %v", opts.Corpus, unwrapPath(err))
				}
			}
			// Evaluation needs no GPU: auto takes one where there is one.
			device, err := pickDevice(device, "cpu", "")
			if err != nil {
				return err
			}
			opts.Device = device
			opts.Tokenizers = openTokenizer
			res, err := runfolder.EvaluateCheckpoint(from, opts)
			if err != nil {
				return err
			}
			if asJSON {
				return printEvalJSON(cmd.OutOrStdout(), res)
			}
			printEval(cmd.OutOrStdout(), res)
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&from, "from", "", "run folder (its newest checkpoint) or checkpoint directory")
	fs.StringVar(&opts.Corpus, "corpus", "", "text file or directory to evaluate on (default: the run's corpus)")
	fs.StringVar(&opts.Split, "split", "", "val, train or all (default: val, or all with --corpus)")
	fs.IntVar(&opts.Batch, "batch", 0, "windows evaluated at once (default: the run's batch)")
	fs.IntVar(&opts.EvalTokens, "eval-tokens", 0, "evaluate this many tokens of random windows, as training does, instead of every token")
	fs.Uint64Var(&seed, "seed", 0, "seed of the --eval-tokens windows (default: the run's seed + 1, training's windows)")
	fs.StringVar(&device, "device", "auto", deviceUsage)
	fs.StringVar(&opts.TokenCache, "token-cache", "", "directory of cached token files (default $XDG_CACHE_HOME/posttrainllm/tokens)")
	fs.BoolVar(&asJSON, "json", false, "print one JSON object")
	return cmd
}

// evalJSON is eval's --json output.
type evalJSON struct {
	Checkpoint  string   `json:"checkpoint"`
	Step        int      `json:"step"`
	Corpus      string   `json:"corpus"` // "" for the default corpus
	Tokenizer   string   `json:"tokenizer"`
	Split       string   `json:"split"`
	SplitTokens int      `json:"split_tokens"`
	Tokens      int      `json:"tokens"` // tokens predicted and averaged over
	Windows     int      `json:"windows"`
	Context     int      `json:"context"`
	Sampled     bool     `json:"sampled"`               // random windows (--eval-tokens)
	Seed        *uint64  `json:"seed,omitempty"`        // of the random windows
	Loss        float64  `json:"loss"`                  // mean cross-entropy, nats per token
	Perplexity  *float64 `json:"perplexity,omitempty"`  // absent when exp(loss) overflows
	ZLoss       *float64 `json:"z_loss,omitempty"`      // z_loss × lse_squared, for a model with z-loss
	LSESquared  *float64 `json:"lse_squared,omitempty"` // mean logsumexp², for a model with z-loss
}

func printEvalJSON(w io.Writer, r runfolder.CheckpointEval) error {
	out := evalJSON{Checkpoint: r.Checkpoint, Step: r.Step, Corpus: r.Corpus, Tokenizer: r.Tokenizer, Split: r.Split,
		SplitTokens: r.SplitLen, Tokens: r.Tokens, Windows: r.Windows, Context: r.Context, Sampled: r.Sampled,
		Loss: r.Loss}
	if math.IsNaN(r.Loss) || math.IsInf(r.Loss, 0) {
		return fmt.Errorf("the loss is %v: the checkpoint's parameters are not finite", r.Loss)
	}
	if p := r.Perplexity(); !math.IsInf(p, 0) {
		out.Perplexity = &p
	}
	if r.Sampled {
		out.Seed = &r.Seed
	}
	if r.ZLoss > 0 {
		z, sq := r.ZLossTerm(), r.LSESquared
		out.ZLoss, out.LSESquared = &z, &sq
	}
	js, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(w, string(js))
	return err
}

func printEval(w io.Writer, r runfolder.CheckpointEval) {
	corpus := r.Corpus
	if corpus == "" {
		corpus = "the default corpus (the Go standard library sources)"
	}
	fmt.Fprintf(w, "checkpoint: %s (step %d)\n", r.Checkpoint, r.Step)
	fmt.Fprintf(w, "corpus:     %s, %s split of %d tokens (%s tokenizer)\n", corpus, r.Split, r.SplitLen, r.Tokenizer)
	if r.Sampled {
		fmt.Fprintf(w, "evaluated:  %d tokens in %d random windows of %d (seed %d)\n", r.Tokens, r.Windows, r.Context, r.Seed)
	} else {
		fmt.Fprintf(w, "evaluated:  %d tokens, every token after the first, in %d windows of %d\n", r.Tokens, r.Windows, r.Context)
	}
	fmt.Fprintf(w, "loss:       %.4f nats/token (cross-entropy)\n", r.Loss)
	fmt.Fprintf(w, "perplexity: %.4g\n", r.Perplexity())
	if r.ZLoss > 0 {
		fmt.Fprintf(w, "z-loss:     %.4g (z_loss %g × mean logsumexp² %.4g), not in the loss above\n", r.ZLossTerm(), r.ZLoss, r.LSESquared)
	}
}

// unwrapPath drops the operation and path that os.Stat's error repeats.
func unwrapPath(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}
