package generate

import (
	"errors"
	"fmt"

	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/data/chattemplate"
	"github.com/posttrainllm/posttrainllm/hf"
)

// FolderTokenizer opens the tokenizer of a Hugging Face folder for a model
// of the given family and vocabulary size. Package generate does not read
// tokenizer.json itself (package data/hftokenizer does): the caller
// passes one.
type FolderTokenizer func(dir, family string, vocab int) (data.Tokenizer, error)

// OpenFolder opens the Hugging Face folder dir (hf.Load) in compute dtype
// dtype ("" for float32: a bfloat16 folder is cast up unless asked
// otherwise) with its tokenizer, chat template (chattemplate.Load; none
// for a folder without one) and end tokens (EndTokens of the folder), on
// the current MLX device. The caller closes the Model.
func OpenFolder(dir, dtype string, openTokenizer FolderTokenizer) (*Model, error) {
	loaded, err := hf.Load(dir, dtype)
	if err != nil {
		return nil, err
	}
	tok, err := openTokenizer(dir, loaded.Family, loaded.Model.Config.VocabSize)
	if err == nil && tok.VocabSize() > loaded.Model.Config.VocabSize {
		err = fmt.Errorf("%s: the tokenizer has %d ids, the model's vocab_size is %d", dir, tok.VocabSize(), loaded.Model.Config.VocabSize)
	}
	var tmpl *chattemplate.Template
	if err == nil {
		tmpl, err = OpenTemplate(dir)
	}
	var ends []int32
	if err == nil {
		ends, err = EndTokens(tok, tmpl, dir)
	}
	if err != nil {
		loaded.Free()
		return nil, err
	}
	return NewModel(loaded.Model, loaded.Params, tok, tmpl, ends, loaded.Free), nil
}

// OpenTemplate reads the chat template of the tokenizer files in dir
// (chattemplate.Load), or nil when they carry none.
func OpenTemplate(dir string) (*chattemplate.Template, error) {
	tmpl, err := chattemplate.Load(dir)
	if errors.Is(err, chattemplate.ErrNoTemplate) {
		return nil, nil
	}
	return tmpl, err
}
