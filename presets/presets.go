// Package presets holds posttrainllm's named training configurations, from
// tiny (trains visibly in seconds on two CPU cores) to behemoth (a GPU run),
// as JSON files embedded in the binary. Each file is a train.Config; the
// command line starts from a preset and overrides single fields with flags.
package presets

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/posttrainllm/posttrainllm/train"
)

//go:embed *.json
var files embed.FS

// names lists the presets from the smallest model to the largest.
var names = []string{"tiny", "small", "medium", "large", "huge", "mega", "behemoth"}

// Names returns the preset names ordered by model size.
func Names() []string { return slices.Clone(names) }

// Load returns the preset called name with defaults filled in.
func Load(name string) (train.Config, error) {
	b, err := files.ReadFile(name + ".json")
	if err != nil || !slices.Contains(names, name) {
		return train.Config{}, fmt.Errorf("unknown preset %q: want one of %s", name, strings.Join(names, ", "))
	}
	cfg, err := Parse(b)
	if err != nil {
		return train.Config{}, fmt.Errorf("preset %s: %w", name, err)
	}
	return cfg, nil
}

// Parse decodes a preset: one JSON object holding a train.Config, with no
// unknown fields and nothing after it. It fills defaults (train.Config
// .WithDefaults) and validates the result, so a preset that Parse accepts
// can start a run. The vocabulary size must be given and cover the
// tokenizer's ids.
func Parse(b []byte) (train.Config, error) {
	var cfg train.Config
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cfg); err != nil {
		return train.Config{}, fmt.Errorf("not a valid preset: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return train.Config{}, errors.New("not a valid preset: data after the JSON object")
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return train.Config{}, err
	}
	return cfg, nil
}
