package train

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/hf"
)

// HFTokenizer is the tokenizer name of a run that uses the Hugging Face
// tokenizer.json it was imported with, kept in the run folder's
// TokenizerDir. Package train does not read tokenizer.json itself (the
// library that does links a terminal progress bar): the caller passes a
// TokenizerOpener that does.
const HFTokenizer = "hf"

// TokenizerOpener builds the tokenizer called name for the run folder
// runDir. posttrainllm's command line passes one that reads
// runDir/hf-tokenizer/tokenizer.json for HFTokenizer (package
// data/hftokenizer) and calls data.NewTokenizer for the other names.
// Programs that never use imported runs' tokenizers pass nil.
type TokenizerOpener func(name, runDir string) (data.Tokenizer, error)

// HFTokenizerPath is the tokenizer.json of run folder runDir that
// HFTokenizer reads.
func HFTokenizerPath(runDir string) string {
	return filepath.Join(runDir, TokenizerDir, "tokenizer.json")
}

// OpenTokenizer returns the tokenizer called name for run folder runDir:
// data.NewTokenizer's for its names; for HFTokenizer, open's reading of
// HFTokenizerPath(runDir), which must exist. A tokenizer.json reads as a
// tokenizer named "hf-" and a hash of the file, so token caches of two
// different files never mix.
func OpenTokenizer(open TokenizerOpener, name, runDir string) (data.Tokenizer, error) {
	if name != HFTokenizer {
		if open != nil {
			return open(name, runDir)
		}
		return data.NewTokenizer(name)
	}
	path := HFTokenizerPath(runDir)
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("tokenizer %s: %s does not exist; want the tokenizer.json the run was imported with (posttrainllm import copies it there)", name, path)
	} else if err != nil {
		return nil, fmt.Errorf("tokenizer %s: %w", name, err)
	}
	if open == nil {
		return nil, fmt.Errorf("tokenizer %s (%s): no TokenizerOpener was given to read tokenizer.json; pass one that uses package data/hftokenizer", name, path)
	}
	tok, err := open(name, runDir)
	if err != nil {
		return nil, fmt.Errorf("tokenizer %s: %w", name, err)
	}
	return tok, nil
}

// OpenRunTokenizer opens the tokenizer of cfg for run folder runDir and
// checks that its ids are ids of cfg's model.
func OpenRunTokenizer(open TokenizerOpener, cfg Config, runDir string) (data.Tokenizer, error) {
	tok, err := OpenTokenizer(open, cfg.Tokenizer, runDir)
	if err != nil {
		return nil, err
	}
	if err := CheckTokenizer(tok, cfg); err != nil {
		return nil, err
	}
	return tok, nil
}

// CheckTokenizer reports a tokenizer that is not the one cfg names, or
// whose ids the model cannot embed.
func CheckTokenizer(tok data.Tokenizer, cfg Config) error {
	if !tokenizerIs(tok, cfg.Tokenizer) {
		return fmt.Errorf("the tokenizer is %s, the config says tokenizer %q", tok.Name(), cfg.Tokenizer)
	}
	if v := cfg.Model.VocabSize; v > 0 && tok.VocabSize() > v {
		return fmt.Errorf("the %s tokenizer has %d ids, the model's vocab_size is %d", tok.Name(), tok.VocabSize(), v)
	}
	return nil
}

// tokenizerIs reports whether tok is the tokenizer a config calls name:
// HFTokenizer names every tokenizer.json, whose tokenizers are named
// "hf-" and a hash of the file.
func tokenizerIs(tok data.Tokenizer, name string) bool {
	if name == HFTokenizer {
		return strings.HasPrefix(tok.Name(), HFTokenizer+"-")
	}
	return tok.Name() == name
}

// CopyTokenizerDir copies the TokenizerDir of run folder from into run
// folder to, when from has one and to does not, so that a run made from
// another (a fine-tune, a fused or resumed-elsewhere run) keeps the
// tokenizer files its config's HFTokenizer reads and export writes.
func CopyTokenizerDir(from, to string) error {
	src, dst := filepath.Join(from, TokenizerDir), filepath.Join(to, TokenizerDir)
	if sameDir(src, dst) {
		return nil
	}
	if _, err := os.Stat(dst); err == nil {
		return nil
	}
	files, err := hf.FindTokenizerFiles(src)
	if err != nil || len(files) == 0 {
		return err
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return fmt.Errorf("tokenizer files: %w", err)
	}
	for _, f := range files {
		if err := hf.CopyFile(f, filepath.Join(dst, filepath.Base(f))); err != nil {
			return fmt.Errorf("tokenizer files: %w", err)
		}
	}
	return nil
}

// sameDir reports whether a and b name the same directory path.
func sameDir(a, b string) bool {
	aa, err1 := filepath.Abs(a)
	bb, err2 := filepath.Abs(b)
	return err1 == nil && err2 == nil && aa == bb
}
