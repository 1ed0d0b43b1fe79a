package train

import (
	"fmt"
	"path/filepath"

	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/data/chattemplate"
	"github.com/posttrainllm/posttrainllm/generate"
)

// RunTemplate returns the chat template of run folder runDir: the one of
// the tokenizer files it was imported with (TokenizerDir), or nil for a
// run without one (byte and GPT-2 runs, models without a template), which
// chats in the built-in format (data.Render, data.ChatPrompt).
func RunTemplate(runDir string) (*chattemplate.Template, error) {
	return generate.OpenTemplate(filepath.Join(runDir, TokenizerDir))
}

// renderRecord renders one fine-tuning record: a chat record with the
// model's template when there is one (chattemplate.Template.Encode), every
// other record, and chat records of runs without a template, with the
// built-in one (data.Render).
func renderRecord(rec data.Record, tok data.Tokenizer, tmpl *chattemplate.Template, maskPrompt bool) (data.Example, error) {
	if tmpl == nil || rec.Kind != data.ChatRecord {
		return data.Render(rec, tok, maskPrompt), nil
	}
	ex, err := tmpl.Encode(rec.Messages, tok, maskPrompt)
	if err != nil {
		return ex, fmt.Errorf("line %d: %w", rec.Line, err)
	}
	return ex, nil
}
