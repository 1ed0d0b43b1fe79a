package checkpoint

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/posttrainllm/posttrainllm/mlx"
)

// File is one file of a checkpoint: Write creates it at path, inside the
// temporary directory that becomes the checkpoint, and syncs it to disk
// before returning (Arrays and Bytes do).
type File struct {
	Name  string
	Write func(path string) error
}

// Arrays is the File name holding arrays under names, in safetensors with
// meta as its metadata.
func Arrays(name string, names []string, arrays []*mlx.Array, meta map[string]string) File {
	return File{Name: name, Write: func(path string) error { return WriteArrays(path, names, arrays, meta) }}
}

// Bytes is the File name holding data.
func Bytes(name string, data []byte) File {
	return File{Name: name, Write: func(path string) error { return WriteFileSync(path, data) }}
}

// Save writes the checkpoint of step under root atomically: files are
// written in order into a temporary directory, each fsynced, the directory
// is renamed into place (Root's DirName(step)) and root is fsynced. A crash
// at any moment leaves either the complete new checkpoint or none, never a
// partial one; re-saving a step replaces its checkpoint the same way. It
// returns the checkpoint's directory. It may be called from any goroutine:
// the arrays are written on the MLX thread.
func Save(root string, step int, files ...File) (string, error) {
	var dir string
	err := mlx.Do(func() error {
		var err error
		dir, err = save(root, step, files)
		return err
	})
	return dir, err
}

// save is Save on the MLX thread.
func save(root string, step int, files []File) (string, error) {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", fmt.Errorf("checkpoint: %w", err)
	}
	tmp, err := os.MkdirTemp(root, tmpPrefix+DirName(step)+"-")
	if err != nil {
		return "", fmt.Errorf("checkpoint: %w", err)
	}
	defer os.RemoveAll(tmp) // a no-op once renamed
	for _, f := range files {
		if err := f.Write(filepath.Join(tmp, f.Name)); err != nil {
			return "", err
		}
	}
	if err := SyncPath(tmp); err != nil {
		return "", err
	}
	final := filepath.Join(root, DirName(step))
	if _, err := os.Stat(final); err == nil {
		// Re-saving a step (a resumed run that stops where it resumed):
		// move the old copy aside first; rename cannot replace a directory.
		// Until the new copy is in place, List finds the old one under its
		// .old name, so a crash here loses nothing.
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
	if err := SyncPath(root); err != nil {
		return "", err
	}
	return final, nil
}

// WriteArrays writes arrays under names to the safetensors file path with
// meta as its metadata, and fsyncs it. Names must be distinct, one per
// array. Call it on the MLX thread (mlx.Do).
func WriteArrays(path string, names []string, arrays []*mlx.Array, meta map[string]string) error {
	if len(names) != len(arrays) {
		return fmt.Errorf("checkpoint: %s: %d names for %d arrays, want one each", path, len(names), len(arrays))
	}
	m := make(map[string]*mlx.Array, len(arrays))
	for i, n := range names {
		if _, dup := m[n]; dup {
			return fmt.Errorf("checkpoint: duplicate array name %q", n)
		}
		m[n] = arrays[i]
	}
	if err := mlx.SaveSafetensors(path, m, meta); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return SyncPath(path)
}

// WriteFileSync writes data to path, replacing what it held, and fsyncs
// it before returning, so the data is on disk once it returns.
func WriteFileSync(path string, data []byte) error {
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

// SyncPath fsyncs a file or directory: a directory's sync makes the
// entries created or renamed in it durable.
func SyncPath(path string) error {
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
