package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/posttrainllm/posttrainllm/data"
)

// tokenizeOptions are the tokenize command's flags.
type tokenizeOptions struct {
	tokenizer   string
	out         string
	shardTokens int
	valTokens   int
	field       string
}

// tokenizeBatchBytes is how much document text tokenize encodes at once,
// on all CPUs, before writing it.
const tokenizeBatchBytes = 32 << 20

func newTokenizeCmd() *cobra.Command {
	var opts tokenizeOptions
	cmd := &cobra.Command{
		Use:   "tokenize --out PREFIX INPUT...",
		Short: "Write text or jsonl as llm.c token shards for train --data",
		Long: `tokenize encodes text into the .bin token shards of llm.c and
modded-nanogpt (a 256-int32 header, then uint16 tokens; uint32 for
vocabularies over 65,536), so that corpora larger than memory train with
train --data, and shards made by either tool train in the other.

Each INPUT is a .jsonl file (one JSON object per line; --field names the
text, "text" by default, as in FineWeb), a text file, or a directory whose
text files are collected as train --corpus collects them. Every document (a
jsonl line or a text file) is preceded by <|endoftext|>, as llm.c does.

The first --val-tokens tokens go to PREFIX_val_000000.bin, the rest to
PREFIX_train_000000.bin, PREFIX_train_000001.bin, ... of --shard-tokens each.
Existing shards at PREFIX are never overwritten.`,
		Example: `  posttrainllm tokenize --out data/shakespeare input.txt
  posttrainllm tokenize --val-tokens 1000000 --out data/fineweb fineweb-*.jsonl
  posttrainllm train --preset small --tokenizer gpt2 --data 'data/fineweb_train_*.bin' --val-data 'data/fineweb_val_*.bin'`,
		Args: cobra.MinimumNArgs(1),
	}
	fs := cmd.Flags()
	fs.StringVar(&opts.tokenizer, "tokenizer", "gpt2", "tokenizer: "+strings.Join(data.TokenizerNames(), " or "))
	fs.StringVar(&opts.out, "out", "", "shard path prefix, such as data/fineweb (required)")
	fs.IntVar(&opts.shardTokens, "shard-tokens", 100_000_000, "tokens per training shard")
	fs.IntVar(&opts.valTokens, "val-tokens", 0, "tokens of the held-out shard PREFIX_val_000000.bin, taken first (0: none; train --data then holds out its last shard)")
	fs.StringVar(&opts.field, "field", "text", "the string field of each jsonl object that holds the text")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		return runTokenize(cmd.OutOrStdout(), opts, args)
	}
	return cmd
}

func runTokenize(w io.Writer, opts tokenizeOptions, inputs []string) error {
	if opts.out == "" {
		return usageError("--out is required: the shard path prefix, such as data/fineweb")
	}
	tok, err := data.NewTokenizer(opts.tokenizer)
	if err != nil {
		return usageError("invalid --tokenizer %s: %v", opts.tokenizer, err)
	}
	for _, in := range inputs {
		if _, err := os.Stat(in); err != nil {
			return usageError("invalid input %s: %v", in, unwrapPath(err))
		}
	}
	sw, err := data.NewShardWriter(opts.out, tok.VocabSize(), opts.shardTokens, opts.valTokens)
	if err != nil {
		return usageError("invalid --out %s: %v", opts.out, err)
	}
	enc := &docEncoder{tok: tok, sw: sw}
	for _, in := range inputs {
		if err := enc.addInput(in, opts.field); err != nil {
			return err
		}
	}
	if err := enc.flush(); err != nil {
		return err
	}
	paths, err := sw.Close()
	if err != nil {
		return err
	}
	if len(paths) == 0 {
		return fmt.Errorf("tokenize: the inputs hold no documents")
	}
	fmt.Fprintf(w, "%d documents, %d tokens (%s tokenizer) in %d shards:\n", enc.docs, sw.Tokens(), tok.Name(), len(paths))
	for _, p := range paths {
		fmt.Fprintf(w, "  %s\n", p)
	}
	return nil
}

// docEncoder gathers documents into batches, encodes each batch on all
// CPUs and writes the ids in input order.
type docEncoder struct {
	tok   data.Tokenizer
	sw    *data.ShardWriter
	batch []string
	bytes int
	docs  int
}

// addInput adds the documents of one input: the lines of a .jsonl file or
// the text files of a file or directory.
func (e *docEncoder) addInput(path, field string) error {
	if st, err := os.Stat(path); err == nil && st.Mode().IsRegular() && strings.EqualFold(filepath.Ext(path), ".jsonl") {
		return data.ReadJSONL(path, field, e.add)
	}
	corpus, err := data.LoadCorpus(path)
	if err != nil {
		return err
	}
	for _, f := range corpus.Files {
		text, err := os.ReadFile(f.Path)
		if err != nil {
			return fmt.Errorf("tokenize: %w", err)
		}
		if err := e.add(string(text)); err != nil {
			return err
		}
	}
	return nil
}

// add queues one document, encoding the batch when it is large enough.
func (e *docEncoder) add(doc string) error {
	e.batch = append(e.batch, doc)
	e.bytes += len(doc)
	e.docs++
	if e.bytes >= tokenizeBatchBytes {
		return e.flush()
	}
	return nil
}

// flush encodes and writes the queued documents.
func (e *docEncoder) flush() error {
	for _, ids := range data.EncodeDocuments(e.tok, e.batch) {
		if err := e.sw.Write(ids); err != nil {
			return err
		}
	}
	e.batch, e.bytes = e.batch[:0], 0
	return nil
}
