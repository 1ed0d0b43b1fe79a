package hf

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// TokenizerFiles are the files of a folder that describe its tokenizer
// and generation defaults (chat template and end tokens included); import keeps them with the run and export
// writes them back, so an exported folder is complete for transformers.
var TokenizerFiles = []string{
	"tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json", "generation_config.json",
	"tokenizer.model", "vocab.json", "merges.txt",
}

// FindTokenizerFiles returns the paths of the TokenizerFiles that dir
// holds.
func FindTokenizerFiles(dir string) ([]string, error) {
	var out []string
	for _, name := range TokenizerFiles {
		p := filepath.Join(dir, name)
		info, err := os.Stat(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("hf: %w", err)
		}
		if info.Mode().IsRegular() {
			out = append(out, p)
		}
	}
	return out, nil
}

// CopyFile copies the regular file src to dst, which it creates.
func CopyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
