package runfolder

import (
	"fmt"
	"path/filepath"

	"github.com/posttrainllm/posttrainllm/checkpoint"
	"github.com/posttrainllm/posttrainllm/generate"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/train"
)

// OpenGenerator opens a run for generation (chat, sample, serve): path is
// a run folder, its newest checkpoint, or a checkpoint directory; with
// adapter (a fine-tune's run folder or checkpoint), the fine-tune's model
// with path, when not empty, as its base (LoadAdapted). The Model has
// the run's tokenizer, the chat template and end tokens of the tokenizer
// files an imported run keeps (train.TokenizerDir; generate.EndTokens), and
// lives on device. The caller closes it.
func OpenGenerator(path, adapter, device string, open train.TokenizerOpener) (*generate.Model, error) {
	var out *generate.Model
	err := mlx.Do(func() error {
		if err := mlx.UseDevice(device); err != nil {
			return err
		}
		var err error
		out, err = openGenerator(path, adapter, open)
		return err
	})
	return out, err
}

// openGenerator is OpenGenerator on the MLX thread.
func openGenerator(path, adapter string, open train.TokenizerOpener) (*generate.Model, error) {
	var (
		dir  string
		cfg  train.Config
		m    *generate.Model
		free func()
	)
	if adapter != "" {
		a, err := loadAdapted(adapter, path)
		if err != nil {
			return nil, err
		}
		dir, cfg, free = a.Dir, a.State.Config, a.Free
		m = generate.NewModel(a.Model, a.Params, nil, nil, nil, free)
	} else {
		d, err := checkpoint.Resolve(path)
		if err != nil {
			return nil, err
		}
		st, net, params, f, err := loadModel(d)
		if err != nil {
			return nil, err
		}
		dir, cfg, free = d, st.Config, f
		m = generate.NewModel(net, params, nil, nil, nil, free)
	}
	if err := finishGenerator(m, cfg, checkpoint.RunDirOf(dir), open); err != nil {
		free()
		return nil, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	return m, nil
}

// finishGenerator gives m the tokenizer of cfg and the template and end
// tokens of run folder runDir.
func finishGenerator(m *generate.Model, cfg train.Config, runDir string, open train.TokenizerOpener) error {
	tok, err := train.OpenRunTokenizer(open, cfg, runDir)
	if err != nil {
		return err
	}
	tmpl, err := train.RunTemplate(runDir)
	if err != nil {
		return err
	}
	ends, err := generate.EndTokens(tok, tmpl, filepath.Join(runDir, train.TokenizerDir))
	if err != nil {
		return err
	}
	m.Tokenizer, m.Template, m.EndTokens = tok, tmpl, ends
	return nil
}
