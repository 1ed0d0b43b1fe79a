package checkpoint

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// List returns the complete checkpoint directories under root, oldest
// first. Temporary directories of interrupted writes are ignored; a step's
// .old copy, left by a crash while that step was re-saved, stands in for
// the step when the step's own directory is missing.
func List(root string) ([]string, error) {
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

// ErrNotFound means a run folder holds no checkpoint to resume from.
var ErrNotFound = errors.New("no checkpoint")

// Latest returns the newest checkpoint directory of a run folder.
func Latest(runDir string) (string, error) {
	dirs, err := List(Root(runDir))
	if errors.Is(err, os.ErrNotExist) || (err == nil && len(dirs) == 0) {
		return "", fmt.Errorf("%s: %w (expected %s/%s########)", runDir, ErrNotFound, checkpointDir, stepPrefix)
	}
	if err != nil {
		return "", err
	}
	return dirs[len(dirs)-1], nil
}

// Prune deletes all but the newest keep checkpoints under root, and
// leftovers of interrupted writes. Each deletion starts with a rename
// (removeDir), so a crash while pruning leaves no partial checkpoint.
func Prune(root string, keep int) error {
	dirs, err := List(root)
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

// Resolve is the one rule for what a --from or --resume path may name: a
// checkpoint directory (one holding state.json, such as
// RUN/checkpoints/step-00000400), which it returns as given, or a run
// folder, for which it returns the newest complete checkpoint under
// RUN/checkpoints. A file, a missing path or a folder with neither is an
// error that says what was expected.
func Resolve(path string) (string, error) {
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
		return path, nil // the loader validates every file
	}
	dir, err := Latest(path)
	if errors.Is(err, ErrNotFound) {
		return "", fmt.Errorf("%s: %w: want a run folder (with %s/%s########) or a checkpoint directory (with %s)",
			path, ErrNotFound, checkpointDir, stepPrefix, StateFile)
	}
	return dir, err
}
