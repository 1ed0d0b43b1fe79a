package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/posttrainllm/posttrainllm/checkpoint"
	"github.com/posttrainllm/posttrainllm/train"
)

// checkpointRule is the help paragraph on what flag (--from, --resume)
// accepts: the rule checkpoint.Resolve applies, the same in every
// command.
func checkpointRule(flag string) string {
	return flag + ` takes a run folder, meaning its newest checkpoint, or one checkpoint
directory (RUN/checkpoints/step-NNNNNNNN, the folder holding state.json):
the one rule of train --resume, sample --from and eval --from.`
}

// checkpointPaths is that rule in a usage error.
const checkpointPaths = "a run folder, meaning its newest checkpoint, or a checkpoint directory RUN/checkpoints/step-NNNNNNNN"

// runFolderOf returns the run folder of a --resume path: the path itself,
// or, for a checkpoint directory RUN/checkpoints/step-N, RUN.
func runFolderOf(resumePath, checkpointDir string) string {
	if filepath.Clean(resumePath) != filepath.Clean(checkpointDir) {
		return resumePath
	}
	parent := filepath.Dir(filepath.Clean(checkpointDir))
	if filepath.Clean(parent) == filepath.Clean(checkpoint.Root(filepath.Dir(parent))) {
		return filepath.Dir(parent)
	}
	return parent
}

// runFiles are what a run writes into its folder; --overwrite removes them.
var runFiles = []string{"checkpoints", train.MetricsFile, train.TensorBoardDir, plotFile}

// checkOut checks, without creating anything, that out can be a run
// folder: a directory (or a path that can become one) that this process may
// write, holding no other run's checkpoints unless resuming is true (it is
// the folder being resumed) or overwrite is set.
func checkOut(out string, resuming, overwrite bool) error {
	info, err := os.Stat(out)
	switch {
	case err == nil && !info.IsDir():
		return usageError("invalid --out %s: it is a file; want a directory for the run", out)
	case err == nil:
		if err := probeWritable(out); err != nil {
			return usageError("invalid --out %s: the directory is not writable: %v", out, err)
		}
		if resuming || overwrite {
			return nil
		}
		if last, err := checkpoint.Latest(out); err == nil {
			return usageError("--out %s already holds a run (newest checkpoint %s); continue it with --resume %s, or replace it with --overwrite",
				out, filepath.Base(last), out)
		}
		return nil
	case errors.Is(err, fs.ErrNotExist):
		// The folder will be created: its nearest existing ancestor must be
		// a writable directory.
		dir := filepath.Dir(filepath.Clean(out))
		for {
			info, err := os.Stat(dir)
			if err == nil {
				if !info.IsDir() {
					return usageError("invalid --out %s: %s is a file, not a directory", out, dir)
				}
				if err := probeWritable(dir); err != nil {
					return usageError("invalid --out %s: cannot create it in %s: %v", out, dir, err)
				}
				return nil
			}
			if !errors.Is(err, fs.ErrNotExist) {
				return usageError("invalid --out %s: %v", out, err)
			}
			next := filepath.Dir(dir)
			if next == dir {
				return usageError("invalid --out %s: no existing parent directory", out)
			}
			dir = next
		}
	default:
		return usageError("invalid --out %s: %v", out, err)
	}
}

// probeWritable creates and removes a temporary file in dir: the one check
// of writability that holds for every user and file system.
func probeWritable(dir string) error {
	f, err := os.CreateTemp(dir, ".posttrainllm-probe-")
	if err != nil {
		return err
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}

// clearRun removes what an earlier run wrote into out (checkpoints,
// metrics, TensorBoard events, plot) and nothing else.
func clearRun(out string) error {
	for _, name := range runFiles {
		if err := os.RemoveAll(filepath.Join(out, name)); err != nil {
			return fmt.Errorf("--overwrite: %w", err)
		}
	}
	return nil
}
