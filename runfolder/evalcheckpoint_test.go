package runfolder

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestEvaluateCheckpointRejectsBadOptions(t *testing.T) {
	dir := t.TempDir()
	if _, err := EvaluateCheckpoint(dir, EvalOptions{Split: "test"}); err == nil || !strings.Contains(err.Error(), `"test"`) {
		t.Fatalf("split test: want an error naming it, got %v", err)
	}
	if _, err := EvaluateCheckpoint(filepath.Join(dir, "missing"), EvalOptions{}); err == nil {
		t.Fatal("a missing path was accepted")
	}
	if _, err := EvaluateCheckpoint(dir, EvalOptions{}); err == nil || !strings.Contains(err.Error(), "no checkpoint") {
		t.Fatalf("a folder without checkpoints: want an error saying so, got %v", err)
	}
}
