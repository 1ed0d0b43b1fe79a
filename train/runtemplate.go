package train

import (
	"path/filepath"

	"github.com/posttrainllm/posttrainllm/data/chattemplate"
	"github.com/posttrainllm/posttrainllm/generate"
)

// TokenizerDir is where a run imported from a Hugging Face folder keeps the
// folder's tokenizer files (hf.TokenizerFiles); export writes them back.
const TokenizerDir = "hf-tokenizer"

// RunTemplate returns the chat template of run folder runDir: the one of
// the tokenizer files it was imported with (TokenizerDir), or nil for a
// run without one (byte and GPT-2 runs, models without a template), which
// chats in the built-in format (data.Render, data.ChatPrompt).
func RunTemplate(runDir string) (*chattemplate.Template, error) {
	return generate.OpenTemplate(filepath.Join(runDir, TokenizerDir))
}
