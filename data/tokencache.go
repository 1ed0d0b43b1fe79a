package data

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// DefaultCacheDir returns where token files are cached by default:
// $XDG_CACHE_HOME/posttrainllm/tokens, or ~/.cache/posttrainllm/tokens when
// XDG_CACHE_HOME is unset or not absolute.
func DefaultCacheDir() (string, error) {
	if x := os.Getenv("XDG_CACHE_HOME"); filepath.IsAbs(x) {
		return filepath.Join(x, "posttrainllm", "tokens"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("token cache directory: XDG_CACHE_HOME is unset and %w", err)
	}
	return filepath.Join(home, ".cache", "posttrainllm", "tokens"), nil
}

// CacheFileName returns the name of the token file for corpus c encoded by
// tok: tokenizer name, corpus hash and format version, so that any change
// to one of them selects a different file.
func CacheFileName(c *Corpus, tok Tokenizer) string {
	return fmt.Sprintf("%s-%s.v%d.tok", tok.Name(), c.Hash, tokenFileVersion)
}

// OpenTokens returns the tokens of corpus c under tok, tokenizing the corpus
// only when cacheDir ("" for DefaultCacheDir) holds no valid token file for
// it. A cached file that is corrupt, or whose header names another
// tokenizer, vocabulary size or corpus hash, is rebuilt. The caller must
// Close the result.
func OpenTokens(c *Corpus, tok Tokenizer, cacheDir string) (*Tokens, error) {
	if cacheDir == "" {
		dir, err := DefaultCacheDir()
		if err != nil {
			return nil, err
		}
		cacheDir = dir
	}
	meta := TokenFileMeta{Tokenizer: tok.Name(), VocabSize: tok.VocabSize(), CorpusHash: c.Hash}
	if err := meta.validate(); err != nil {
		return nil, fmt.Errorf("token cache for corpus %q: %w", c.Root, err)
	}
	path := filepath.Join(cacheDir, CacheFileName(c, tok))

	t, err := ReadTokenFile(path)
	switch {
	case err == nil && t.Info().TokenFileMeta == meta:
		return t, nil
	case err == nil:
		t.Close() // stale: rebuild below
	case errors.Is(err, fs.ErrNotExist):
		// not built yet
	default:
		// corrupt: rebuild below; the rename replaces it
	}

	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return nil, fmt.Errorf("token cache: %w", err)
	}
	if err := buildTokenFile(path, c, tok, meta); err != nil {
		return nil, err
	}
	return ReadTokenFile(path)
}

// buildTokenFile tokenizes c with tok into a token file at path.
func buildTokenFile(path string, c *Corpus, tok Tokenizer, meta TokenFileMeta) error {
	w, err := createTokenFile(path, meta)
	if err != nil {
		return err
	}
	if err := EncodeCorpus(c, tok, w.write); err != nil {
		w.abort()
		return fmt.Errorf("tokenizing corpus %q with %s: %w", c.Root, tok.Name(), err)
	}
	return w.commit()
}
