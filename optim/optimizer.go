package optim

import (
	"fmt"
	"strings"

	"github.com/posttrainllm/posttrainllm/mlx"
)

// Param describes one parameter for an optimizer: its checkpoint name, its
// shape, and its role.
type Param struct {
	Name  string // checkpoint name, e.g. "blocks.3.attn.wq.weight"
	Shape []int
	// Decay says whether weight decay applies. The caller decides; the
	// nanoGPT rule is yes for 2-D weights, no for norms and biases.
	Decay bool
	// Matrix marks a hidden 2-D weight matrix that Muon may orthogonalise
	// (not embeddings, not the output head). Other optimizers ignore it.
	Matrix bool
}

// Optimizer is a functional optimizer whose update traces into a compiled
// training step.
type Optimizer interface {
	// Name returns the optimizer's registry name, e.g. "adamw".
	Name() string
	// Init returns the initial state arrays, flat and ordered so they can be
	// inputs and outputs of a compiled function. The caller owns them.
	Init() ([]*mlx.Array, error)
	// StateNames gives each state array a unique checkpoint name, in Init's
	// order: "step" for the update counter, then "<param>.<slot>" such as
	// "blocks.3.attn.wq.weight.adam_m".
	StateNames() []string
	// Update applies one optimizer update, inside or outside a traced
	// function. params and grads follow the []Param order given to the
	// constructor; state follows Init's order; lr is a 0-D array (an input of
	// the compiled step, never a captured float). Update reads nothing back
	// to the host; arrays it creates and does not return are freed before it
	// returns. It returns new arrays and does not free its inputs.
	Update(params, grads, state []*mlx.Array, lr *mlx.Array) (newParams, newState []*mlx.Array, err error)
}

// Config holds one configuration per optimizer; New uses the one its name
// selects. Fields are taken literally (a zero is a zero, not "default"), so
// start from DefaultConfig and change what you need.
type Config struct {
	AdamW     AdamWConfig
	Lion      LionConfig
	Adafactor AdafactorConfig
	Muon      MuonConfig
	SGD       SGDConfig
	GaLore    GaLoreConfig
	Sophia    SophiaConfig
}

// DefaultConfig returns every optimizer's defaults (see each Default*Config).
func DefaultConfig() Config {
	return Config{
		AdamW:     DefaultAdamWConfig(),
		Lion:      DefaultLionConfig(),
		Adafactor: DefaultAdafactorConfig(),
		Muon:      DefaultMuonConfig(),
		SGD:       DefaultSGDConfig(),
		GaLore:    DefaultGaLoreConfig(),
		Sophia:    DefaultSophiaConfig(),
	}
}

// names lists the registry in a fixed order.
var names = []string{"adamw", "lion", "adafactor", "muon", "sgd", "galore", "sophia"}

// Names returns the optimizer names New accepts.
func Names() []string { return append([]string(nil), names...) }

// New builds the optimizer called name ("adamw", "lion", "adafactor",
// "muon", "sgd", "galore" or "sophia") for params, with the matching part of cfg.
func New(name string, params []Param, cfg Config) (Optimizer, error) {
	switch name {
	case "adamw":
		return NewAdamW(params, cfg.AdamW)
	case "lion":
		return NewLion(params, cfg.Lion)
	case "adafactor":
		return NewAdafactor(params, cfg.Adafactor)
	case "muon":
		return NewMuon(params, cfg.Muon)
	case "sgd":
		return NewSGD(params, cfg.SGD)
	case "galore":
		return NewGaLore(params, cfg.GaLore)
	case "sophia":
		return NewSophia(params, cfg.Sophia)
	}
	return nil, fmt.Errorf("optim: unknown optimizer %q: want one of %s", name, strings.Join(names, ", "))
}
