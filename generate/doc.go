// Package generate makes text with a language model: the key/value cache,
// sampling (temperature, top-k, top-p, seeds), stop conditions (end
// tokens, stop strings, a token budget) and chat turns through the
// model's own template. It is what the sample and chat commands use, and
// what an OpenAI-compatible server is built on.
//
// Three levels, each usable alone:
//
//   - Tokens extends a prompt of ids by sampled ids, calling an Emit
//     function with each as it is made: the loop, on the MLX thread.
//   - Model bundles a network, its parameters, tokenizer, chat template
//     and end tokens. Model.Generate answers a Request (a raw prompt or
//     chat messages, Options, stop strings) with a Result: the text, the
//     prompt and completion token counts and the finish reason ("stop" or
//     "length"), streaming the text through a callback as it is decoded.
//     Requests are independent: a server calls it once per request.
//   - Session is a conversation: its messages and a cache of what the
//     model has already read, so each turn feeds the model only the new
//     tokens.
//
// A Model is opened from a Hugging Face folder with OpenFolder, and from
// a run folder, checkpoint or fine-tune with runfolder.OpenGenerator.
package generate
