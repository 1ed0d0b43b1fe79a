// Package serve answers the OpenAI HTTP API (GET /v1/models, POST
// /v1/completions and POST /v1/chat/completions, streamed or not) over a
// model that generates text, and over adapters of it that requests pick
// by their "model" field (AdapterBackend). It holds no MLX code (of
// package generate it takes only the Sampling type of its Params): a
// Backend (package generate's batched engine, through the command line)
// encodes prompts and generates; this package parses and checks requests,
// lets as many generations run at once as the backend batches and queues
// the rest, applies stop strings, and writes the OpenAI response and
// error shapes, the legacy completions' logprobs and echo included (what
// evaluation harnesses score prompts with).
package serve

import (
	"context"

	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/generate"
)

// Backend is a model the server generates with. Its methods may be called
// from any goroutine; the server runs at most Concurrency Generate calls
// at once.
type Backend interface {
	// Concurrency is how many generations the backend runs together
	// (its batch); the server queues requests beyond it.
	Concurrency() int
	// VocabSize bounds the token ids a prompt given as ids may hold.
	VocabSize() int
	// TokenText is the text of one token, for logprobs.
	TokenText(id int32) string
	// DecodeText is the text of a list of tokens, for an echoed prompt
	// given as ids.
	DecodeText(ids []int32) string
	// Model is the model's id, listed by /v1/models and accepted in the
	// requests' "model" field.
	Model() string
	// ContextLength is the most tokens a prompt and its completion may
	// hold together.
	ContextLength() int
	// EncodePrompt returns the ids of a completion prompt, with the special
	// tokens written in it matched as their ids.
	EncodePrompt(text string) ([]int32, error)
	// EncodeChat renders messages through the model's chat template up to
	// the assistant turn that generation continues, and returns its ids.
	EncodeChat(messages []data.Message) ([]int32, error)
	// Generate continues prompt, calling emit with each new piece of text
	// as it is decoded (whole characters only). It stops at the model's end
	// tokens (FinishStop), after p.MaxTokens tokens (FinishLength), when
	// emit returns false (FinishStop: a stop string was met), or when ctx
	// is done (ctx.Err()).
	Generate(ctx context.Context, prompt []int32, p Params, emit func(text string) bool) (Generation, error)
}

// AdapterBackend is a Backend that also serves adapters of its model
// (LoRA or DoRA fine-tunes of the same base), each under a model id of
// its own: a request picks one by its "model" field, /v1/models lists
// them beside the base, and Generate finds the id in Params.Adapter.
type AdapterBackend interface {
	Backend
	// Adapters lists the adapters' model ids; none is empty or Model().
	Adapters() []string
}

// Params are a request's sampling settings and the adapter it asked for.
type Params struct {
	// Sampling holds the request's settings as package generate takes
	// them: MaxTokens (at least 1), Temperature (0 picks the most likely
	// token), TopP (nucleus sampling; 1 keeps all) and Seed. TopK is 0, no
	// limit: the OpenAI API has no top_k.
	generate.Sampling
	// HasSeed says whether the request set Seed (its "seed", an int64
	// taken bit for bit); without, each request draws its own.
	HasSeed bool
	// Logprobs asks for Generation.Logprobs; Echo for Generation.Prompt.
	Logprobs, Echo bool
	// Adapter is the model id of the adapter the request named
	// (AdapterBackend.Adapters); empty for the base model.
	Adapter string
}

// TokenLogprob is one token with its log-probability under the model and
// the most likely token at that position with its own.
type TokenLogprob struct {
	ID, Top             int32
	Logprob, TopLogprob float64
	// Scored is false for a prompt's first token, which has no context.
	Scored bool
}

// Finish reasons, as the OpenAI API names them.
const (
	FinishStop   = "stop"   // an end token or a stop string
	FinishLength = "length" // MaxTokens reached
)

// Generation is what a Generate call made.
type Generation struct {
	// Tokens counts the generated tokens, an end token included.
	Tokens int
	// Finish is FinishStop or FinishLength.
	Finish string
	// Logprobs are the generated tokens' (an end token excluded), when
	// Params.Logprobs asked for them.
	Logprobs []TokenLogprob
	// Prompt are the prompt's tokens, scored, when Params.Echo and
	// Params.Logprobs asked for them.
	Prompt []TokenLogprob
}
