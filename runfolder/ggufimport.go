package runfolder

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/posttrainllm/posttrainllm/hf"
	"github.com/posttrainllm/posttrainllm/train"
)

// ImportGGUF reads the GGUF file src (see hf.LoadGGUF) and writes it as
// the step-0 checkpoint of a new run folder out, as ImportHF does for a
// folder: base's training settings, the file's model, no optimizer state,
// and in out/hf-tokenizer the tokenizer files made from the file's
// metadata (tokenizer.json, tokenizer_config.json with the chat template,
// generation_config.json). A run whose tokenizer is train.HFTokenizer needs
// them; with another tokenizer a file whose tokenizer cannot be made is
// still imported. out must not exist or be empty. It returns the
// checkpoint directory and the model's family.
func ImportGGUF(src, out string, base train.Config, opts ImportOptions) (dir, family string, err error) {
	if entries, err := os.ReadDir(out); err == nil && len(entries) > 0 {
		return "", "", fmt.Errorf("import: %s exists and is not empty; choose a new run folder", out)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(out) // it was missing or empty: a failed import leaves nothing
		}
	}()
	loaded, err := hf.LoadGGUF(src, opts.Dtype)
	if err != nil {
		return "", "", err
	}
	defer loaded.Free()
	if loaded.TokenizerErr != nil && base.Tokenizer == train.HFTokenizer {
		return "", "", fmt.Errorf("import: tokenizer %s: %w", train.HFTokenizer, loaded.TokenizerErr)
	}
	dir, err = importModel(loaded.Model, out, base, opts, func(tokDir string) error {
		return WriteTokenizerFiles(tokDir, loaded.Tokenizer)
	}, loaded.TokenizerErr == nil)
	if err != nil {
		return "", "", err
	}
	return dir, loaded.Family, nil
}

// WriteTokenizerFiles writes files (name to contents, as hf.GGUFModel
// holds them) into the folder dir, which must exist; a file already there
// is an error, not overwritten.
func WriteTokenizerFiles(dir string, files map[string][]byte) error {
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if name != filepath.Base(name) {
			return fmt.Errorf("tokenizer file %q: want a file name", name)
		}
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return err
		}
		_, err = f.Write(files[name])
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	return nil
}
