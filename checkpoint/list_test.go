package checkpoint

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// saveState saves a checkpoint of step under run's Root holding only its
// state file, which is what listing and resolving look at.
func saveState(t *testing.T, run string, step int) string {
	t.Helper()
	dir, err := Save(Root(run), step, Bytes(StateFile, []byte("{}\n")))
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// Checkpoint directories are named by step, padded so names sort as
// steps do, under RUN/checkpoints; RunDirOf goes back to RUN.
func TestLayout(t *testing.T) {
	run := t.TempDir()
	dir := saveState(t, run, 7)
	if want := filepath.Join(run, "checkpoints", "step-00000007"); dir != want {
		t.Fatalf("Save put step 7 at %s, want %s", dir, want)
	}
	if got := RunDirOf(dir); got != run {
		t.Fatalf("RunDirOf(%s) = %s, want %s", dir, got, run)
	}
	if got := RunDirOf(dir + "/"); got != run {
		t.Fatalf("RunDirOf(%s/) = %s, want %s", dir, got, run)
	}
	b, err := os.ReadFile(filepath.Join(dir, StateFile))
	if err != nil || string(b) != "{}\n" {
		t.Fatalf("state file holds %q, %v; want what Save was given", b, err)
	}
}

// Resolve is the rule of every --from and --resume: a checkpoint
// directory as given, a run folder's newest checkpoint, and a clear error
// for anything else.
func TestResolveRule(t *testing.T) {
	run := t.TempDir()
	older := saveState(t, run, 2)
	newer := saveState(t, run, 4)
	for path, want := range map[string]string{run: newer, older: older} {
		if got, err := Resolve(path); err != nil || got != want {
			t.Errorf("Resolve(%s) = %s, %v; want %s", path, got, err, want)
		}
	}
	file := filepath.Join(older, StateFile)
	for path, want := range map[string][]string{
		filepath.Join(run, "missing"): {"missing", "no such file"},
		file:                          {"is a file", "run folder", "checkpoint directory"},
		t.TempDir():                   {"no checkpoint", "run folder", "checkpoint directory", StateFile},
	} {
		_, err := Resolve(path)
		for _, w := range want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("Resolve(%s): error %v, want it to mention %q", path, err, w)
			}
		}
	}
	if _, err := Latest(t.TempDir()); !errors.Is(err, ErrNotFound) {
		t.Errorf("Latest of an empty folder: %v, want ErrNotFound", err)
	}
}

// List orders checkpoints by step, not by name, and skips what is no
// checkpoint; Prune keeps the newest and removes leftovers of interrupted
// writes.
func TestListAndPrune(t *testing.T) {
	run := t.TempDir()
	root := Root(run)
	for _, step := range []int{3, 100000000, 12, 1} { // the long one outgrows the padding
		saveState(t, run, step)
	}
	for _, junk := range []string{"step-x", "notes", tmpPrefix + DirName(5) + "-1"} {
		if err := os.Mkdir(filepath.Join(root, junk), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, DirName(6)), nil, 0o644); err != nil { // a file, not a checkpoint
		t.Fatal(err)
	}
	dirs, err := List(root)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range dirs {
		names = append(names, filepath.Base(d))
	}
	want := []string{DirName(1), DirName(3), DirName(12), DirName(100000000)}
	if !slices.Equal(names, want) {
		t.Fatalf("List = %v, want %v", names, want)
	}
	if err := Prune(root, 2); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	slices.Sort(left)
	wantLeft := []string{"notes", DirName(12), DirName(6), DirName(100000000), "step-x"}
	slices.Sort(wantLeft)
	if !slices.Equal(left, wantLeft) {
		t.Fatalf("after Prune(2), %s holds %v, want %v", root, left, wantLeft)
	}
}
