package data

// The chat template renders records into tokens with a flag per token
// saying whether its prediction counts in the loss. It is plain text, so
// it works with the byte tokenizer and GPT-2 BPE alike:
//
//	<|user|>\n{content}<EOT><|assistant|>\n{content}<EOT>
//
// Each turn is a role header "<|role|>\n" (role system, user or
// assistant), the content, and the tokenizer's end-of-text id (EOT: the
// NUL byte for the byte tokenizer, <|endoftext|> for GPT-2). With prompt
// masking only the assistant turns' content and their EOT count: the
// headers never do, so the model is not trained to predict the
// "<|assistant|>" it is prompted with, and it learns to end its turn.
// Prompt/completion records are the prompt followed directly by the
// completion and EOT; text records are the text and EOT, all counted.
//
// ChatPrompt renders a conversation up to the assistant header that
// generation continues from; generation stops at EOT.

// ChatHeader is the role header of a chat turn: "<|role|>\n".
func ChatHeader(role string) string { return "<|" + role + "|>\n" }

// Example is a record rendered as tokens: Train[i] says whether Tokens[i]
// is a target that counts in the loss.
type Example struct {
	Tokens []int32
	Train  []bool
}

// add appends ids with the given flag.
func (e *Example) add(ids []int32, train bool) {
	e.Tokens = append(e.Tokens, ids...)
	for range ids {
		e.Train = append(e.Train, train)
	}
}

// Targets counts the tokens that count in the loss.
func (e Example) Targets() int {
	n := 0
	for _, t := range e.Train {
		if t {
			n++
		}
	}
	return n
}

// Render tokenises a record with the chat template. With maskPrompt, only
// completions and assistant turns (with their EOT) count; without, every
// token but the role headers does. Text records count every token either
// way.
func Render(rec Record, tok Tokenizer, maskPrompt bool) Example {
	var e Example
	eot := []int32{tok.EOT()}
	switch rec.Kind {
	case TextRecord:
		e.add(tok.Encode(rec.Text), true)
		e.add(eot, true)
	case CompletionRecord:
		e.add(tok.Encode(rec.Prompt), !maskPrompt)
		e.add(tok.Encode(rec.Completion), true)
		e.add(eot, true)
	case ChatRecord:
		for _, m := range rec.Messages {
			counts := m.Role == "assistant" || !maskPrompt
			e.add(tok.Encode(ChatHeader(m.Role)), false)
			e.add(tok.Encode(m.Content), counts)
			e.add(eot, counts)
		}
	}
	return e
}

// ChatPrompt renders messages and the assistant header that a model's
// reply follows: the prompt for generating the next assistant turn.
func ChatPrompt(messages []Message, tok Tokenizer) []int32 {
	var e Example
	for _, m := range messages {
		e.add(tok.Encode(ChatHeader(m.Role)), false)
		e.add(tok.Encode(m.Content), false)
		e.add([]int32{tok.EOT()}, false)
	}
	e.add(tok.Encode(ChatHeader("assistant")), false)
	return e.Tokens
}
