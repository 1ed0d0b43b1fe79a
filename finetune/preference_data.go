package finetune

import (
	"fmt"

	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/data/chattemplate"
)

// LoadPairRows reads a jsonl file of preference records
// (data.ReadPreferenceRecords) and renders each answer as fine-tuning
// renders a record (renderRecord: conversations with the model's own
// template tmpl, nil for the built-in one), the prompt masked: only the
// final reply and the end of turn closing it count (data.KeepLastSpan),
// not the assistant turns of the shared conversation. The pairs become
// rows of context targets, chosen and rejected side by side
// (data.BuildPairRows). Errors name the file and the record's line.
func LoadPairRows(path string, tok data.Tokenizer, tmpl *chattemplate.Template, context int) (*data.Rows, error) {
	recs, err := data.ReadPreferenceRecords(path)
	if err != nil {
		return nil, err
	}
	pairs := make([]data.PairExample, len(recs))
	for i, r := range recs {
		c, err := renderRecord(r.Chosen, tok, tmpl, true)
		if err != nil {
			return nil, fmt.Errorf("%s: chosen: %w", path, err)
		}
		rj, err := renderRecord(r.Rejected, tok, tmpl, true)
		if err != nil {
			return nil, fmt.Errorf("%s: rejected: %w", path, err)
		}
		pairs[i] = data.PairExample{Chosen: data.KeepLastSpan(c), Rejected: data.KeepLastSpan(rj), Line: r.Line}
	}
	rows, err := data.BuildPairRows(pairs, context, tok.EOT())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return rows, nil
}
