package train

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/peft"
)

// CheckpointFormat is the version of the checkpoint layout written here.
const CheckpointFormat = 1

// Files of a checkpoint directory (OUT/checkpoints/step-00000100/).
const (
	ModelFile     = "model.safetensors"     // parameters, model config in metadata
	OptimizerFile = "optimizer.safetensors" // optimizer state
	StateFile     = "state.json"            // RunState
	checkpointDir = "checkpoints"
	stepPrefix    = "step-"
	tmpPrefix     = ".tmp-"
	oldSuffix     = ".old" // the previous copy of a step being re-saved
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
func (c *Checkpoint) OrderedParams(m *model.TinyGPT) ([]*mlx.Array, error) {
	var params []*mlx.Array
	err := mlx.Do(func() error {
		var err error
		params, err = orderParams(filepath.Join(c.Dir, ModelFile), c.Params, m)
		return err
	})
	return params, err
}

// orderParams picks m's parameters by name from the arrays of file,
// checking their shapes and dtype.
func orderParams(file string, named map[string]*mlx.Array, m *model.TinyGPT) ([]*mlx.Array, error) {
	if peft.IsQuantizedNamed(m.Specs, named) {
		q, _, err := peft.QuantizedFromNamed(file, m.Specs, named)
		if err != nil {
			return nil, err
		}
		return nil, errQuantizedBase(file, q, "a whole-model run (train --resume, a full fine-tune)")
	}
	names := make([]string, len(m.Specs))
	shapes := make([][]int, len(m.Specs))
	for i, s := range m.Specs {
		names[i], shapes[i] = s.Name, s.Shape
	}
	params, err := ordered(file, named, names, shapes)
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

// CheckpointRoot is where a run folder keeps its checkpoints.
func CheckpointRoot(runDir string) string { return filepath.Join(runDir, checkpointDir) }

func stepDirName(step int) string { return fmt.Sprintf("%s%08d", stepPrefix, step) }

// SaveCheckpoint writes a checkpoint for st.Step under root atomically: the
// files go into a temporary directory, each is fsynced, the directory is
// renamed into place and root is fsynced. A crash at any moment leaves either
// the complete new checkpoint or none, never a partial one. It returns the
// checkpoint's directory.
func SaveCheckpoint(root string, st RunState, paramNames []string, params []*mlx.Array,
	stateNames []string, optState []*mlx.Array) (string, error) {
	var dir string
	err := mlx.Do(func() error {
		var err error
		dir, err = saveCheckpoint(root, st, paramNames, params, stateNames, optState)
		return err
	})
	return dir, err
}

// checkpointFile is a file of a checkpoint besides the model, optimizer
// and state files (a fine-tune's adapters and settings): write creates it
// at path, inside the temporary directory that becomes the checkpoint.
type checkpointFile struct {
	name  string
	write func(path string) error
}

// saveCheckpoint is SaveCheckpoint on the MLX thread, with extra files;
// no paramNames and params leave out the model file (an adapter
// checkpoint holds adapters instead), and no stateNames and optState the
// optimizer file (an imported model at step 0, see loadCheckpoint).
func saveCheckpoint(root string, st RunState, paramNames []string, params []*mlx.Array,
	stateNames []string, optState []*mlx.Array, extra ...checkpointFile) (string, error) {
	if len(paramNames) != len(params) || len(stateNames) != len(optState) {
		return "", fmt.Errorf("checkpoint: %d names for %d params, %d names for %d state arrays",
			len(paramNames), len(params), len(stateNames), len(optState))
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", fmt.Errorf("checkpoint: %w", err)
	}
	tmp, err := os.MkdirTemp(root, tmpPrefix+stepDirName(st.Step)+"-")
	if err != nil {
		return "", fmt.Errorf("checkpoint: %w", err)
	}
	defer os.RemoveAll(tmp) // a no-op once renamed
	st.Format = CheckpointFormat
	cfgJSON, err := json.Marshal(st.Config.Model)
	if err != nil {
		return "", fmt.Errorf("checkpoint: %w", err)
	}
	meta := map[string]string{"model_config": string(cfgJSON), "step": strconv.Itoa(st.Step), "format": "mlx"}
	if paramNames != nil || params != nil {
		if err := saveArrays(filepath.Join(tmp, ModelFile), paramNames, params, meta); err != nil {
			return "", err
		}
	}
	for _, f := range extra {
		if err := f.write(filepath.Join(tmp, f.name)); err != nil {
			return "", err
		}
	}
	if stateNames != nil || optState != nil {
		if err := saveArrays(filepath.Join(tmp, OptimizerFile), stateNames, optState,
			map[string]string{"optimizer": st.Config.Optimizer, "step": strconv.Itoa(st.Step)}); err != nil {
			return "", err
		}
	} else if st.Step != 0 {
		return "", fmt.Errorf("checkpoint: step %d without optimizer state; only a step-0 checkpoint may leave it out", st.Step)
	}
	js, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return "", fmt.Errorf("checkpoint: %w", err)
	}
	if err := writeFileSync(filepath.Join(tmp, StateFile), append(js, '\n')); err != nil {
		return "", err
	}
	if err := syncPath(tmp); err != nil {
		return "", err
	}
	final := filepath.Join(root, stepDirName(st.Step))
	if _, err := os.Stat(final); err == nil {
		// Re-saving a step (a resumed run that stops where it resumed):
		// move the old copy aside first; rename cannot replace a directory.
		// Until the new copy is in place, ListCheckpoints finds the old one
		// under its .old name, so a crash here loses nothing.
		old := final + oldSuffix
		if err := removeDir(root, old); err != nil {
			return "", fmt.Errorf("checkpoint: %w", err)
		}
		if err := os.Rename(final, old); err != nil {
			return "", fmt.Errorf("checkpoint: %w", err)
		}
		defer removeDir(root, old)
	}
	if err := os.Rename(tmp, final); err != nil {
		return "", fmt.Errorf("checkpoint: %w", err)
	}
	if err := syncPath(root); err != nil {
		return "", err
	}
	return final, nil
}

func saveArrays(path string, names []string, arrs []*mlx.Array, meta map[string]string) error {
	m := make(map[string]*mlx.Array, len(arrs))
	for i, n := range names {
		if _, dup := m[n]; dup {
			return fmt.Errorf("checkpoint: duplicate array name %q", n)
		}
		m[n] = arrs[i]
	}
	if err := mlx.SaveSafetensors(path, m, meta); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return syncPath(path)
}

func writeFileSync(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("checkpoint: writing %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("checkpoint: syncing %s: %w", path, err)
	}
	return f.Close()
}

// syncPath fsyncs a file or directory.
func syncPath(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("checkpoint: syncing %s: %w", path, err)
	}
	return nil
}

// removeDir deletes dir, a directory under root, by first renaming it to a
// temporary name: a crash mid-deletion then leaves a temporary directory,
// which readers ignore, never a partial checkpoint under a step name.
func removeDir(root, dir string) error {
	if _, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	doomed := filepath.Join(root, tmpPrefix+"rm-"+filepath.Base(dir))
	if err := os.RemoveAll(doomed); err != nil {
		return err
	}
	if err := os.Rename(dir, doomed); err != nil {
		return err
	}
	return os.RemoveAll(doomed)
}

// ListCheckpoints returns the complete checkpoint directories under root,
// oldest first. Temporary directories of interrupted writes are ignored; a
// step's .old copy, left by a crash while that step was re-saved, stands
// in for the step when the step's own directory is missing.
func ListCheckpoints(root string) ([]string, error) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, err
	}
	type ck struct {
		step int
		dir  string
		old  bool
	}
	byStep := map[int]ck{}
	for _, e := range entries {
		base, old := strings.CutSuffix(e.Name(), oldSuffix)
		if !e.IsDir() || !strings.HasPrefix(base, stepPrefix) {
			continue
		}
		step, err := strconv.Atoi(strings.TrimPrefix(base, stepPrefix))
		if err != nil || step < 0 {
			continue
		}
		if prev, ok := byStep[step]; ok && !prev.old {
			continue
		}
		byStep[step] = ck{step, filepath.Join(root, e.Name()), old}
	}
	cks := make([]ck, 0, len(byStep))
	for _, c := range byStep {
		cks = append(cks, c)
	}
	slices.SortFunc(cks, func(a, b ck) int { return cmp.Compare(a.step, b.step) })
	dirs := make([]string, len(cks))
	for i, c := range cks {
		dirs[i] = c.dir
	}
	return dirs, nil
}

// ErrNoCheckpoint means a run folder holds no checkpoint to resume from.
var ErrNoCheckpoint = errors.New("no checkpoint")

// LatestCheckpoint returns the newest checkpoint directory of a run folder.
func LatestCheckpoint(runDir string) (string, error) {
	dirs, err := ListCheckpoints(CheckpointRoot(runDir))
	if errors.Is(err, os.ErrNotExist) || (err == nil && len(dirs) == 0) {
		return "", fmt.Errorf("%s: %w (expected %s/%s########)", runDir, ErrNoCheckpoint, checkpointDir, stepPrefix)
	}
	if err != nil {
		return "", err
	}
	return dirs[len(dirs)-1], nil
}

// PruneCheckpoints deletes all but the newest keep checkpoints under root,
// and leftovers of interrupted writes. Each deletion starts with a rename
// (removeDir), so a crash while pruning leaves no partial checkpoint.
func PruneCheckpoints(root string, keep int) error {
	dirs, err := ListCheckpoints(root)
	if err != nil {
		return err
	}
	for i := 0; i < len(dirs)-keep; i++ {
		if err := removeDir(root, dirs[i]); err != nil {
			return err
		}
	}
	entries, _ := os.ReadDir(root)
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, tmpPrefix) {
			os.RemoveAll(filepath.Join(root, name))
		} else if base, ok := strings.CutSuffix(name, oldSuffix); ok && strings.HasPrefix(base, stepPrefix) {
			// An .old copy is garbage once its step's own directory exists.
			if _, err := os.Stat(filepath.Join(root, base, StateFile)); err == nil {
				removeDir(root, filepath.Join(root, name))
			}
		}
	}
	return nil
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
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&st); err != nil {
		return RunState{}, fmt.Errorf("state.json is not valid: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return RunState{}, errors.New("state.json is not valid: data after the JSON object")
	}
	if st.Format != CheckpointFormat {
		return RunState{}, fmt.Errorf("state.json has format %d, this build reads format %d", st.Format, CheckpointFormat)
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
	st, err := ReadRunState(filepath.Join(dir, StateFile))
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	params, _, err := mlx.LoadSafetensors(filepath.Join(dir, ModelFile))
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	optFile := filepath.Join(dir, OptimizerFile)
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

// ordered picks arrays by name in the given order, checking shapes.
func ordered(what string, m map[string]*mlx.Array, names []string, shapes [][]int) ([]*mlx.Array, error) {
	if len(m) != len(names) {
		return nil, fmt.Errorf("%s has %d arrays, the model needs %d", what, len(m), len(names))
	}
	out := make([]*mlx.Array, len(names))
	for i, n := range names {
		a, ok := m[n]
		if !ok {
			return nil, fmt.Errorf("%s lacks %q", what, n)
		}
		if shapes != nil && !slices.Equal(a.Shape(), shapes[i]) {
			return nil, fmt.Errorf("%s: %q has shape %v, this model needs %v", what, n, a.Shape(), shapes[i])
		}
		out[i] = a
	}
	return out, nil
}
