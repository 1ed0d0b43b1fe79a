package main

import (
	"bytes"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/posttrainllm/posttrainllm/train"
)

func TestPlotLossWritesDecodablePNG(t *testing.T) {
	v0, v1 := 5.0, 2.5
	ms := []train.Metrics{{Step: 0, ValLoss: &v0}}
	for s := 1; s <= 50; s++ {
		ms = append(ms, train.Metrics{Step: s, Loss: 5 / math.Sqrt(float64(s))})
	}
	ms[len(ms)-1].ValLoss = &v1
	path := filepath.Join(t.TempDir(), plotFile)
	if err := plotLoss(ms, "test run", path); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("loss.png does not decode: %v", err)
	}
	if r := img.Bounds(); r.Dx() < 100 || r.Dy() < 100 {
		t.Fatalf("plot is %v, want a real picture", r)
	}
	// The picture is not blank: more than one colour is drawn.
	first := img.At(0, 0)
	distinct := false
	for y := 0; y < img.Bounds().Dy() && !distinct; y += 3 {
		for x := 0; x < img.Bounds().Dx(); x += 3 {
			if img.At(x, y) != first {
				distinct = true
				break
			}
		}
	}
	if !distinct {
		t.Fatal("plot is a single colour")
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Fatalf("plot left %d files behind, want only %s", len(entries), plotFile)
	}
}

func TestPlotLossRejectsEmptyMetrics(t *testing.T) {
	path := filepath.Join(t.TempDir(), plotFile)
	if err := plotLoss([]train.Metrics{{Step: 1, Loss: math.NaN()}}, "x", path); err == nil {
		t.Fatal("a plot without a finite loss was accepted")
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("a failed plot left %s behind (%v)", path, err)
	}
}

func TestPlotRunReadsMetrics(t *testing.T) {
	dir := t.TempDir()
	lines := `{"step":0,"loss":0,"val_loss":5.5,"lr":0.001,"grad_norm":0,"steps_per_s":0,"tokens_per_s":0,"elapsed_s":0}
{"step":10,"loss":4.1,"lr":0.001,"grad_norm":1,"steps_per_s":3,"tokens_per_s":300,"elapsed_s":1}
{"step":20,"loss":3.2,"val_loss":3.4,"lr":0.001,"grad_norm":1,"steps_per_s":3,"tokens_per_s":300,"elapsed_s":2}
`
	if err := os.WriteFile(filepath.Join(dir, train.MetricsFile), []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	path, err := plotRun(dir, "run")
	if err != nil {
		t.Fatal(err)
	}
	if info, err := os.Stat(path); err != nil || info.Size() == 0 {
		t.Fatalf("PlotRun wrote %s: %v", path, err)
	}
}
