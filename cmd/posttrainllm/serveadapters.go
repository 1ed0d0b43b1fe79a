package main

import (
	"fmt"
	"strings"

	"github.com/posttrainllm/posttrainllm/checkpoint"
	"github.com/posttrainllm/posttrainllm/finetune"
	"github.com/posttrainllm/posttrainllm/generate"
)

// servedAdapter is one --adapter NAME=RUN of serve: a LoRA or DoRA
// fine-tune served per request under the model id NAME.
type servedAdapter struct {
	name, run string
	base      string // the base the fine-tune recorded
}

// parseServeAdapters reads serve's --adapter values: a single RUN is a
// fine-tune served as the model, its adapters merged into its base
// (returned as merged); NAME=RUN values, as many as wanted, are adapters
// served per request beside the --from model. The two forms do not mix.
// The runs are checked as usage errors before anything loads.
func parseServeAdapters(values []string) (merged string, adapters []servedAdapter, err error) {
	var plain []string
	seen := map[string]bool{}
	for _, v := range values {
		name, run, ok := strings.Cut(v, "=")
		if !ok {
			plain = append(plain, v)
			continue
		}
		if name == "" || run == "" {
			return "", nil, usageError("invalid --adapter %s: want NAME=RUN, a model id and a LoRA or DoRA fine-tune's run folder or checkpoint", v)
		}
		if seen[name] {
			return "", nil, usageError("--adapter %s: the name %s is given twice; each adapter needs a model id of its own", v, name)
		}
		seen[name] = true
		dir, err := checkpoint.Resolve(run)
		if err != nil {
			return "", nil, usageError("invalid --adapter %s: %v", v, err)
		}
		ft, err := finetune.ReadConfig(dir)
		if err != nil {
			return "", nil, usageError("invalid --adapter %s: %v", v, err)
		}
		if !ft.UsesAdapter() {
			return "", nil, usageError("invalid --adapter %s: %s is a full fine-tune (method %s), which has no adapters; serve it with --from", v, dir, ft.Method)
		}
		if ft.Quantize != 0 {
			return "", nil, usageError("invalid --adapter %s: %s trained over its base quantized to %d bits, which the served float base does not compute; merge it with posttrainllm fuse --adapter %s and serve the result", v, dir, ft.Quantize, run)
		}
		adapters = append(adapters, servedAdapter{name: name, run: run, base: ft.Base})
	}
	switch {
	case len(plain) > 1:
		return "", nil, usageError("--adapter given %d times without NAME=: serve one fine-tune merged (--adapter RUN) or several adapters per request (--adapter NAME=RUN, repeatable)", len(plain))
	case len(plain) == 1 && len(adapters) > 0:
		return "", nil, usageError("--adapter %s with --adapter %s=…: a fine-tune served merged (--adapter RUN) and adapters per request (--adapter NAME=RUN) do not mix; give the base with --from and every fine-tune as NAME=RUN", plain[0], adapters[0].name)
	case len(plain) == 1:
		return plain[0], nil, nil
	}
	return "", adapters, nil
}

// loadServeAdapters loads the adapters of each fine-tune for model m and
// returns them in order with the function that frees them (after the
// engine that uses them is closed).
func loadServeAdapters(m *generate.Model, id string, adapters []servedAdapter) ([]*finetune.AdapterRun, func(), error) {
	var runs []*finetune.AdapterRun
	free := func() {
		for _, r := range runs {
			r.Free()
		}
	}
	for _, a := range adapters {
		if a.name == id {
			free()
			return nil, nil, usageError("--adapter %s=%s: the name %s is the base model's id (--model); give the adapter another", a.name, a.run, a.name)
		}
		r, err := finetune.LoadAdapterRun(a.run, m.Net.Specs)
		if err != nil {
			free()
			return nil, nil, fmt.Errorf("--adapter %s=%s: %w", a.name, a.run, err)
		}
		runs = append(runs, r)
	}
	return runs, free, nil
}

// setServeAdapters registers the loaded adapters on engine e under their
// names and returns the names.
func setServeAdapters(e *generate.Engine, adapters []servedAdapter, runs []*finetune.AdapterRun) ([]string, error) {
	names := make([]string, len(adapters))
	for i, a := range adapters {
		if err := e.SetAdapter(a.name, generate.Adapter{Spec: runs[i].Adapter, Params: runs[i].Params}); err != nil {
			return nil, fmt.Errorf("--adapter %s=%s: %w", a.name, a.run, err)
		}
		names[i] = a.name
	}
	return names, nil
}
