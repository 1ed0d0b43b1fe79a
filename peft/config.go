// Package peft holds parameter-efficient fine-tuning adapters (LoRA, DoRA)
// as transforms of a model's flat parameter list. An adapter needs no model
// internals: it maps (base parameters, adapter parameters) to the effective
// parameters, which the model's pure Loss and Logits take unchanged, so a
// fine-tune traces into the same compiled step as pretraining and fusing is
// the same function, evaluated once.
//
// For an adapted projection W0 stored [out, in] with rank-r factors
// A [r, in] and B [out, r] and scale s = alpha/r:
//
//	LoRA: W = W0 + s·B·A
//	DoRA: W = m ⊙ (W0 + s·B·A) / ‖W0 + s·B·A‖   (row norms, m [out])
//
// as in the LoRA and DoRA papers, Hugging Face PEFT and mlx-lm. B starts at
// zero and m at ‖W0‖, so a fresh adapter leaves the model as it was.
package peft

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// Method is an adapter kind.
type Method string

// Adapter methods.
const (
	LoRA Method = "lora" // low-rank update W0 + s·B·A
	DoRA Method = "dora" // LoRA's direction with a learned magnitude per output row
)

// Methods lists the methods New accepts.
func Methods() []Method { return []Method{LoRA, DoRA} }

// Config says which projections get adapters and how large they are. It is
// stored with adapter checkpoints (adapter_config.json).
type Config struct {
	Method Method  `json:"method"`
	Rank   int     `json:"rank"`  // r, the inner dimension of B·A
	Alpha  float64 `json:"alpha"` // the update is scaled by Alpha/Rank
	// Targets selects projections by what they are: "attn" (wq, wk, wv,
	// wo), "mlp" (w1, w2 and, in gated families, w3), "all" (both), or a
	// projection's own name ("wq", "w2", …), matched against the second
	// to last part of each matrix parameter's name
	// (blocks.3.attn.wq.weight → wq).
	Targets []string `json:"targets"`
}

// DefaultConfig is a rank-8 LoRA on the attention projections with
// alpha 16 (scale 2), the defaults of mlx-lm's and PEFT's examples.
func DefaultConfig() Config {
	return Config{Method: LoRA, Rank: 8, Alpha: 16, Targets: []string{"attn"}}
}

// targetGroups are the names Targets accepts besides projection names.
var targetGroups = map[string][]string{
	"attn": {"wq", "wk", "wv", "wo"},
	"mlp":  {"w1", "w2", "w3"},
	"all":  {"wq", "wk", "wv", "wo", "w1", "w2", "w3"},
}

// Scale is Alpha/Rank, the factor of B·A.
func (c Config) Scale() float64 { return c.Alpha / float64(c.Rank) }

// Validate reports the first setting that cannot build an adapter.
func (c Config) Validate() error {
	if !slices.Contains(Methods(), c.Method) {
		return fmt.Errorf("peft: method %q, want lora or dora", c.Method)
	}
	if c.Rank < 1 {
		return fmt.Errorf("peft: rank %d, want >= 1", c.Rank)
	}
	if math.IsNaN(c.Alpha) || math.IsInf(c.Alpha, 0) || c.Alpha <= 0 {
		return fmt.Errorf("peft: alpha %g, want a finite value > 0", c.Alpha)
	}
	if len(c.Targets) == 0 {
		return fmt.Errorf("peft: no targets, want a list such as attn,mlp or wq,wv")
	}
	return nil
}

// projections expands Targets into the set of projection names.
func (c Config) projections() map[string]bool {
	set := map[string]bool{}
	for _, t := range c.Targets {
		t = strings.TrimSpace(t)
		if g, ok := targetGroups[t]; ok {
			for _, p := range g {
				set[p] = true
			}
			continue
		}
		set[t] = true
	}
	return set
}

// projectionName is the part of a parameter name that Targets matches:
// "wq" for "blocks.3.attn.wq.weight".
func projectionName(param string) string {
	parts := strings.Split(param, ".")
	if len(parts) < 2 {
		return param
	}
	return parts[len(parts)-2]
}
