package main

import (
	"errors"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"sync"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/posttrainllm/posttrainllm/internal/qos"
	"github.com/posttrainllm/posttrainllm/train"
)

// plotFile is the name of the loss plot inside a run folder.
const plotFile = "loss.png"

// plotLoss draws the training loss (a line over steps) and, where measured,
// the held-out loss (points) of ms into a PNG at path, replacing it
// atomically. title heads the plot.
func plotLoss(ms []train.Metrics, title, path string) error {
	var trainXY, valXY plotter.XYs
	for _, m := range ms {
		// The step-0 line carries only the initial held-out loss.
		if m.Step > 0 && finite(m.Loss) {
			trainXY = append(trainXY, plotter.XY{X: float64(m.Step), Y: m.Loss})
		}
		if m.ValLoss != nil && finite(*m.ValLoss) {
			valXY = append(valXY, plotter.XY{X: float64(m.Step), Y: *m.ValLoss})
		}
	}
	if len(trainXY) == 0 && len(valXY) == 0 {
		return errors.New("plot: no finite loss to draw")
	}
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "step"
	p.Y.Label.Text = "loss (nats/token)"
	p.Add(plotter.NewGrid())
	if len(trainXY) > 0 {
		line, err := plotter.NewLine(trainXY)
		if err != nil {
			return fmt.Errorf("plot: %w", err)
		}
		line.Color = color.RGBA{R: 31, G: 119, B: 180, A: 255}
		line.Width = vg.Points(1.5)
		p.Add(line)
		p.Legend.Add("train", line)
	}
	if len(valXY) > 0 {
		pts, err := plotter.NewScatter(valXY)
		if err != nil {
			return fmt.Errorf("plot: %w", err)
		}
		pts.GlyphStyle = draw.GlyphStyle{Color: color.RGBA{R: 214, G: 39, B: 40, A: 255},
			Radius: vg.Points(3), Shape: draw.CircleGlyph{}}
		p.Add(pts)
		p.Legend.Add("validation", pts)
	}
	p.Legend.Top = true
	wt, err := p.WriterTo(8*vg.Inch, 5*vg.Inch, "png")
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path)+"-")
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	defer os.Remove(tmp.Name()) // fails harmlessly once renamed
	if _, err := wt.WriteTo(tmp); err != nil {
		tmp.Close()
		return fmt.Errorf("plot: writing %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("plot: writing %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	return nil
}

// plotRun draws a run folder's metrics.jsonl into its loss.png and returns
// the plot's path.
func plotRun(runDir, title string) (string, error) {
	ms, err := train.ReadMetrics(filepath.Join(runDir, train.MetricsFile))
	if err != nil {
		return "", fmt.Errorf("plot: %w", err)
	}
	path := filepath.Join(runDir, plotFile)
	return path, plotLoss(ms, title, path)
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// lossPlot redraws a run's loss.png whenever the trainer writes a
// checkpoint, so the plot of a run stopped early (interrupted, diverged)
// shows it up to its last checkpoint. It draws on a goroutine of its own at
// utility QoS (package qos): the training loop does not wait for the plot,
// and on Apple silicon the drawing stays off the performance cores that
// feed the GPU. A checkpoint written while a drawing is under way asks for
// one more, which then reads all the metrics so far.
type lossPlot struct {
	runDir, title string
	path          string // the plot, once drawn (read after wait)
	err           error  // the last drawing's error (read after wait)

	start  sync.Once
	redraw chan struct{} // a drawing is asked for; buffered, so asks coalesce
	done   chan struct{} // closed when the drawer has stopped
}

// hook returns h with the plot chained after its OnCheckpoint.
func (p *lossPlot) hook(h train.Hooks) train.Hooks {
	prev := h.OnCheckpoint
	h.OnCheckpoint = func(dir string, step int) {
		if prev != nil {
			prev(dir, step)
		}
		p.ask()
	}
	return h
}

// ask has the plot redrawn soon.
func (p *lossPlot) ask() {
	p.start.Do(func() {
		p.redraw = make(chan struct{}, 1)
		p.done = make(chan struct{})
		go func() {
			defer close(p.done)
			qos.Run(qos.Utility, func() {
				for range p.redraw {
					p.path, p.err = plotRun(p.runDir, p.title)
				}
			})
		}()
	})
	select {
	case p.redraw <- struct{}{}:
	default: // a drawing is already asked for and will read these metrics too
	}
}

// wait finishes the drawings asked for and stops the drawer; path and err
// are final then. A drawing that read the metrics log while the trainer
// was appending to it may have failed on a line half written: once the run
// is over, one more drawing settles it.
func (p *lossPlot) wait() {
	if p.redraw == nil {
		return
	}
	close(p.redraw)
	<-p.done
	p.redraw = nil
	if p.err != nil {
		p.path, p.err = plotRun(p.runDir, p.title)
	}
}
