package train

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"github.com/posttrainllm/posttrainllm/checkpoint"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/peft"
)

// RunState is the JSON part of a checkpoint: what, besides arrays, a resumed
// run needs to continue exactly.
type RunState struct {
	Format int    `json:"format"`
	Step   int    `json:"step"` // optimizer updates completed
	Config Config `json:"config"`
	// SamplerState restores the training data sampler to the next unseen batch.
	SamplerState   []byte  `json:"sampler_state"`
	TokensSeen     int64   `json:"tokens_seen"`
	ElapsedSeconds float64 `json:"elapsed_s"`
	// Best is the lowest held-out loss up to this checkpoint, which
	// Config.KeepBest and Config.Patience carry over a resume; nil before
	// the first evaluation.
	Best *Best `json:"best,omitempty"`
}

// Checkpoint is a loaded checkpoint. The caller frees Params and OptState.
// OptState is nil for a step-0 checkpoint written without optimizer state
// (an imported model): a run that resumes from it starts its optimizer
// fresh, as every run does at step 0.
type Checkpoint struct {
	Dir      string
	State    RunState
	Params   map[string]*mlx.Array
	OptState map[string]*mlx.Array
}

// Free releases the checkpoint's arrays.
func (c *Checkpoint) Free() {
	mlx.Do(func() error {
		for _, m := range []map[string]*mlx.Array{c.Params, c.OptState} {
			for _, a := range m {
				a.Free()
			}
		}
		return nil
	})
}

// OrderedParams returns the checkpoint's parameters in m's order (its
// Specs), checking that each is there with m's shape and parameter dtype:
// a parameter list ready for m.Logits, Generate or NewState. The checkpoint
// still owns the arrays; they stay valid until Free.
func (c *Checkpoint) OrderedParams(m *model.Transformer) ([]*mlx.Array, error) {
	var params []*mlx.Array
	err := mlx.Do(func() error {
		var err error
		params, err = OrderParams(filepath.Join(c.Dir, checkpoint.ModelFile), c.Params, m)
		return err
	})
	return params, err
}

// OrderParams picks m's parameters by name from the arrays of file,
// checking their shapes and dtype.
func OrderParams(file string, named map[string]*mlx.Array, m *model.Transformer) ([]*mlx.Array, error) {
	if peft.IsQuantizedNamed(m.Specs, named) {
		q, _, err := peft.QuantizedFromNamed(file, m.Specs, named)
		if err != nil {
			return nil, err
		}
		return nil, QuantizedBaseError(file, q, "a whole-model run (train --resume, a full fine-tune)")
	}
	names, shapes := specNames(m.Specs), SpecShapes(m.Specs)
	params, err := checkpoint.Ordered(file, named, names, shapes)
	if err != nil {
		return nil, err
	}
	want := m.Config.ParamDtype()
	for i, p := range params {
		if p.Dtype() != want {
			return nil, fmt.Errorf("%s: %q is %v, this model keeps parameters in %v", file, names[i], p.Dtype(), want)
		}
	}
	return params, nil
}

// QuantizedBaseError is the refusal of a quantized checkpoint by a path
// that trains or needs every weight in float.
func QuantizedBaseError(file string, q *peft.Quantized, what string) error {
	return fmt.Errorf("%s holds a quantized model (%s; imported from an MLX-quantized folder or fused with --quantize): %s trains every weight and cannot train quantized ones; fine-tune adapters over it (--method lora or dora), or fuse / import float weights",
		file, q, what)
}

// specNames returns the names of specs, in order.
func specNames(specs []model.ParamSpec) []string {
	names := make([]string, len(specs))
	for i, s := range specs {
		names[i] = s.Name
	}
	return names
}

// SpecShapes returns the shapes of specs, in order.
func SpecShapes(specs []model.ParamSpec) [][]int {
	shapes := make([][]int, len(specs))
	for i, s := range specs {
		shapes[i] = s.Shape
	}
	return shapes
}

// SaveCheckpoint writes a checkpoint for st.Step under root atomically: the
// files go into a temporary directory, each is fsynced, the directory is
// renamed into place and root is fsynced. A crash at any moment leaves either
// the complete new checkpoint or none, never a partial one. It returns the
// checkpoint's directory. The extra files (a fine-tune's adapters and
// settings) are written after the model file; no paramNames and params
// leave out the model file (an adapter checkpoint holds adapters
// instead), and no stateNames and optState the optimizer file (an
// imported model at step 0, see LoadCheckpoint).
func SaveCheckpoint(root string, st RunState, paramNames []string, params []*mlx.Array,
	stateNames []string, optState []*mlx.Array, extra ...checkpoint.File) (string, error) {
	return saveCheckpoint(root, st, paramNames, params, stateNames, optState, extra...)
}

// saveCheckpoint is SaveCheckpoint with extra files
// (a fine-tune's adapters and settings), written after the model file; no
// paramNames and params leave out the model file (an adapter checkpoint
// holds adapters instead), and no stateNames and optState the optimizer
// file (an imported model at step 0, see loadCheckpoint).
func saveCheckpoint(root string, st RunState, paramNames []string, params []*mlx.Array,
	stateNames []string, optState []*mlx.Array, extra ...checkpoint.File) (string, error) {
	if len(paramNames) != len(params) || len(stateNames) != len(optState) {
		return "", fmt.Errorf("checkpoint: %d names for %d params, %d names for %d state arrays",
			len(paramNames), len(params), len(stateNames), len(optState))
	}
	if stateNames == nil && optState == nil && st.Step != 0 {
		return "", fmt.Errorf("checkpoint: step %d without optimizer state; only a step-0 checkpoint may leave it out", st.Step)
	}
	st.Format = checkpoint.Format
	cfgJSON, err := json.Marshal(st.Config.Model)
	if err != nil {
		return "", fmt.Errorf("checkpoint: %w", err)
	}
	js, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return "", fmt.Errorf("checkpoint: %w", err)
	}
	var files []checkpoint.File
	if paramNames != nil || params != nil {
		meta := map[string]string{"model_config": string(cfgJSON), "step": strconv.Itoa(st.Step), "format": "mlx"}
		files = append(files, checkpoint.Arrays(checkpoint.ModelFile, paramNames, params, meta))
	}
	files = append(files, extra...)
	if stateNames != nil || optState != nil {
		meta := map[string]string{"optimizer": st.Config.Optimizer, "step": strconv.Itoa(st.Step)}
		files = append(files, checkpoint.Arrays(checkpoint.OptimizerFile, stateNames, optState, meta))
	}
	files = append(files, checkpoint.Bytes(checkpoint.StateFile, append(js, '\n')))
	return checkpoint.Save(root, st.Step, files...)
}

// ReadRunState reads and checks a checkpoint's state.json.
func ReadRunState(path string) (RunState, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return RunState{}, err
	}
	return ParseRunState(b)
}

// ParseRunState decodes state.json bytes, rejecting unknown formats and
// values that cannot describe a checkpoint.
func ParseRunState(b []byte) (RunState, error) {
	var st RunState
	if err := checkpoint.DecodeJSON(bytes.NewReader(b), &st); err != nil {
		return RunState{}, fmt.Errorf("state.json is not valid: %w", err)
	}
	if st.Format != checkpoint.Format {
		return RunState{}, fmt.Errorf("state.json has format %d, this build reads format %d", st.Format, checkpoint.Format)
	}
	if st.Step < 0 {
		return RunState{}, fmt.Errorf("state.json has step %d, want >= 0", st.Step)
	}
	if st.Config.Model.GELU == "" { // written before the gelu option: the exact GELU
		st.Config.Model.GELU = model.GELUExact
	}
	if err := st.Config.Model.Validate(); err != nil {
		return RunState{}, fmt.Errorf("state.json: %w", err)
	}
	return st, nil
}

// LoadCheckpoint reads a checkpoint directory, validating every file.
func LoadCheckpoint(dir string) (*Checkpoint, error) {
	var c *Checkpoint
	err := mlx.Do(func() error {
		var err error
		c, err = loadCheckpoint(dir)
		return err
	})
	return c, err
}

// loadCheckpoint is LoadCheckpoint on the MLX thread.
func loadCheckpoint(dir string) (*Checkpoint, error) {
	st, err := ReadRunState(filepath.Join(dir, checkpoint.StateFile))
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	params, _, err := mlx.LoadSafetensors(filepath.Join(dir, checkpoint.ModelFile))
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	optFile := filepath.Join(dir, checkpoint.OptimizerFile)
	if _, err := os.Lstat(optFile); errors.Is(err, fs.ErrNotExist) && st.Step == 0 {
		return &Checkpoint{Dir: dir, State: st, Params: params}, nil
	}
	opt, _, err := mlx.LoadSafetensors(optFile)
	if err != nil {
		for _, a := range params {
			a.Free()
		}
		return nil, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	return &Checkpoint{Dir: dir, State: st, Params: params, OptState: opt}, nil
}
