package train

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"

	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
)

// SampleOptions control text generation.
type SampleOptions struct {
	MaxTokens   int     // tokens to generate
	Temperature float64 // 0 picks the most likely token (greedy)
	TopK        int     // sample among the k most likely tokens; 0 for all
	Seed        uint64
	// Recompute feeds the whole context for every token instead of only the
	// new one through the model's key/value cache: slower, the same tokens.
	Recompute bool
	// Tokenizers builds the checkpoint's tokenizer when its config names
	// one package data does not know (HFTokenizer); nil for
	// data.NewTokenizer. Generate does not use it.
	Tokenizers TokenizerOpener
}

// Validate reports an option that cannot generate.
func (o SampleOptions) Validate() error {
	if o.MaxTokens < 1 {
		return fmt.Errorf("max tokens = %d, want >= 1", o.MaxTokens)
	}
	if o.Temperature < 0 || math.IsNaN(o.Temperature) || math.IsInf(o.Temperature, 0) {
		return fmt.Errorf("temperature = %g, want a finite value >= 0", o.Temperature)
	}
	if o.TopK < 0 {
		return fmt.Errorf("top-k = %d, want >= 0 (0 for no limit)", o.TopK)
	}
	return nil
}

// Generate extends prompt by opts.MaxTokens tokens. While the text fits the
// model's context, the model sees each token once and keeps its keys and
// values in a cache (model.KVCache); beyond it, each new token is predicted
// from the last context's worth of tokens, recomputed.
func Generate(m *model.TinyGPT, params []*mlx.Array, prompt []int32, opts SampleOptions) ([]int32, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if len(prompt) == 0 {
		return nil, fmt.Errorf("generate: empty prompt; give at least one token")
	}
	var out []int32
	err := mlx.Do(func() error {
		var err error
		out, err = generate(m, params, prompt, opts)
		return err
	})
	return out, err
}

// generate is Generate on the MLX thread.
func generate(m *model.TinyGPT, params []*mlx.Array, prompt []int32, opts SampleOptions) ([]int32, error) {
	key := mlx.RandomKey(opts.Seed)
	defer func() { key.Free() }()
	cache := m.NewKVCache()
	defer cache.Free()
	out := append([]int32(nil), prompt...)
	for i := 0; i < opts.MaxTokens; i++ {
		var next int32
		var err error
		mlx.Run(func() []*mlx.Array {
			keys := mlx.RandomSplit(key, 2)
			var logits *mlx.Array
			if opts.Recompute || len(out) > m.Config.Context {
				cache.Free()
				window := out[max(0, len(out)-m.Config.Context):]
				logits = m.Logits(params, mlx.FromSlice(window, 1, len(window)))
			} else {
				fresh := out[cache.Offset:] // the tokens the cache has not seen
				logits = m.LogitsCached(params, mlx.FromSlice(fresh, 1, len(fresh)), cache)
			}
			n := logits.Dim(1)
			last := mlx.AsType(mlx.Reshape(mlx.Slice(logits, []int{0, n - 1, 0},
				[]int{1, n, m.Config.VocabSize}), m.Config.VocabSize), mlx.Float32)
			var tok *mlx.Array
			if opts.Temperature == 0 {
				tok = mlx.ArgmaxAll(last)
			} else {
				last = mlx.MulScalar(last, 1/opts.Temperature)
				if opts.TopK > 0 && opts.TopK < m.Config.VocabSize {
					kth := mlx.Min(mlx.TopK(last, opts.TopK, -1))
					last = mlx.Where(mlx.Less(last, kth), mlx.Scalar(math.Inf(-1), mlx.Float32), last)
				}
				tok = mlx.RandomCategorical(last, -1, keys[1])
			}
			v, e := tok.Int32s()
			if e != nil {
				err = e
				return nil
			}
			next = v[0]
			key.Free()
			key = keys[0]
			return append([]*mlx.Array{key}, cache.Arrays()...)
		})
		if err != nil {
			return nil, fmt.Errorf("generate: %w", err)
		}
		out = append(out, next)
	}
	return out, nil
}

// SampleCheckpoint loads the model of a checkpoint directory (or the newest
// checkpoint of a run folder) and continues prompt with generated text.
func SampleCheckpoint(path, prompt, device string, opts SampleOptions) (string, error) {
	var text string
	err := mlx.Do(func() error {
		var err error
		text, err = sampleCheckpoint(path, prompt, device, opts)
		return err
	})
	return text, err
}

// sampleCheckpoint is SampleCheckpoint on the MLX thread.
func sampleCheckpoint(path, prompt, device string, opts SampleOptions) (string, error) {
	if err := opts.Validate(); err != nil {
		return "", err
	}
	if err := mlx.UseDevice(device); err != nil {
		return "", err
	}
	dir, err := ResolveCheckpoint(path)
	if err != nil {
		return "", err
	}
	st, m, params, free, err := loadModel(dir)
	if err != nil {
		return "", err
	}
	defer free()
	tok, err := openRunTokenizer(opts.Tokenizers, st.Config, RunDirOf(dir))
	if err != nil {
		return "", fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	ids := tok.Encode(prompt)
	if len(ids) == 0 {
		ids = []int32{tok.EOT()}
	}
	out, err := Generate(m, params, ids, opts)
	if err != nil {
		return "", err
	}
	return tok.Decode(out), nil
}

// loadModel reads the run state and the parameters of checkpoint directory
// dir, in the model's order; free releases the parameters.
func loadModel(dir string) (st RunState, m *model.TinyGPT, params []*mlx.Array, free func(), err error) {
	st, err = ReadRunState(filepath.Join(dir, StateFile))
	if err != nil {
		return st, nil, nil, nil, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	if err := checkModelMemory(st.Config.Model); err != nil {
		return st, nil, nil, nil, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	if m, err = model.New(st.Config.Model); err != nil {
		return st, nil, nil, nil, err
	}
	arrays, _, err := mlx.LoadSafetensors(filepath.Join(dir, ModelFile))
	if err != nil {
		return st, nil, nil, nil, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	free = func() {
		for _, a := range arrays {
			a.Free()
		}
	}
	names := make([]string, len(m.Specs))
	shapes := make([][]int, len(m.Specs))
	for i, s := range m.Specs {
		names[i], shapes[i] = s.Name, s.Shape
	}
	if params, err = ordered(filepath.Join(dir, ModelFile), arrays, names, shapes); err != nil {
		free()
		return st, nil, nil, nil, err
	}
	return st, m, params, free, nil
}

// ResolveCheckpoint is the one rule for what a --from or --resume path may
// name: a checkpoint directory (one holding state.json, such as
// RUN/checkpoints/step-00000400), which it returns as given, or a run
// folder, for which it returns the newest complete checkpoint under
// RUN/checkpoints. A file, a missing path or a folder with neither is an
// error that says what was expected.
func ResolveCheckpoint(path string) (string, error) {
	info, err := os.Stat(path)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err // the path is in the message already
		}
		return "", fmt.Errorf("checkpoint %q: %w", path, err)
	}
	if !info.IsDir() {
		return "", fmt.Errorf("checkpoint %q is a file; want a run folder or a checkpoint directory", path)
	}
	if _, err := os.Stat(filepath.Join(path, StateFile)); err == nil {
		return path, nil // LoadCheckpoint validates every file
	}
	dir, err := LatestCheckpoint(path)
	if errors.Is(err, ErrNoCheckpoint) {
		return "", fmt.Errorf("%s: %w: want a run folder (with %s/%s########) or a checkpoint directory (with %s)",
			path, ErrNoCheckpoint, checkpointDir, stepPrefix, StateFile)
	}
	return dir, err
}
