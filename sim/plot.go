package sim

import (
	"fmt"
	"image/color"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/trimtab/trimtab/sim/report"
)

// Images lists the sweep's figures: TTFT p99 against load per policy;
// each adaptive policy's signal, mode and weights over time; per-pod load
// over time for static 3:2:2 and each adaptive policy (headline level,
// first seed).
func (sw *Sweep) Images() []report.Image {
	name := sw.Scenario.Name
	imgs := []report.Image{{
		Title: fmt.Sprintf("%s: TTFT p99 against %s", name, sw.Scenario.LevelUnit()),
		File:  "bench-" + name + "-ttft-p99.png",
		Draw:  sw.drawTTFT,
	}}
	h := sw.HeadlineIndex()
	unit, level := sw.Scenario.LevelUnit(), fmtLevel(sw.Levels[h])
	for pi, pol := range sw.Policies {
		if !strings.HasPrefix(pol, PolicyAdaptive) || sw.Runs[h][pi][0].Timeline == nil {
			continue
		}
		r := sw.Runs[h][pi][0]
		imgs = append(imgs, report.Image{
			Title: fmt.Sprintf("%s: %s signal, mode and weights at %s %s", name, pol, unit, level),
			File:  "bench-" + name + "-" + pol + ".png",
			Draw:  func(path string) error { return sw.drawControl(path, r) },
		})
	}
	for pi, pol := range sw.Policies {
		if (pol != PolicyStatic322 && !strings.HasPrefix(pol, PolicyAdaptive)) || sw.Runs[h][pi][0].Timeline == nil {
			continue
		}
		r := sw.Runs[h][pi][0]
		imgs = append(imgs, report.Image{
			Title: fmt.Sprintf("%s: per-pod load (running + waiting) under %s at %s %s", name, pol, unit, level),
			File:  "bench-" + name + "-load-" + pol + ".png",
			Draw:  func(path string) error { return sw.drawLoad(path, r) },
		})
	}
	return imgs
}

// WriteImages draws every figure into dir.
func (sw *Sweep) WriteImages(dir string) error { return report.WriteImages(dir, sw.Images()) }

func (sw *Sweep) drawTTFT(path string) error {
	p := plot.New()
	p.Title.Text = sw.Scenario.Name + ": TTFT p99 (mean over seeds)"
	p.X.Label.Text = sw.Scenario.LevelUnit()
	p.Y.Label.Text = "TTFT p99 (ms)"
	p.Legend.Top = true
	p.Legend.Left = true
	sums := sw.Summaries()
	top := 0.0
	for _, row := range sums {
		for _, s := range row {
			top = max(top, s.TTFTP99)
		}
	}
	p.Y.Min, p.Y.Max = 0, top*1.45 // room for the legend
	for pi, name := range sw.Policies {
		xys := make(plotter.XYs, len(sw.Levels))
		for l := range sw.Levels {
			xys[l] = plotter.XY{X: sw.Levels[l], Y: sums[l][pi].TTFTP99}
		}
		line, pts, err := plotter.NewLinePoints(xys)
		if err != nil {
			return err
		}
		line.Color = report.Color(pi)
		line.Dashes = plotutil.Dashes(pi)
		pts.Color = report.Color(pi)
		pts.Shape = plotutil.Shape(pi)
		if name == PolicyAdaptive {
			line.Width = vg.Points(2.5)
		}
		p.Add(line, pts)
		p.Legend.Add(name, line, pts)
	}
	p.Add(plotter.NewGrid())
	return p.Save(7*vg.Inch, 4.5*vg.Inch, path)
}

func (sw *Sweep) drawControl(path string, r *Result) error {
	tl := r.Timeline
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s: %s control loop (seed %d)", sw.Scenario.Name, r.Policy, r.Seed)
	p.X.Label.Text = "time (s)"
	p.Y.Label.Text = "signal / mode / weight share"
	// Headroom above 1 keeps the legend off the curves.
	p.Y.Min, p.Y.Max = 0, 1.6
	p.Y.Tick.Marker = plot.ConstantTicks([]plot.Tick{{Value: 0, Label: "0"}, {Value: 0.25}, {Value: 0.5, Label: "0.5"}, {Value: 0.75}, {Value: 1, Label: "1"}})
	p.Legend.Top = true
	add := func(i int, label string, ys []float64, width vg.Length, dashed bool) error {
		xys := make(plotter.XYs, len(tl.T))
		for k := range tl.T {
			xys[k] = plotter.XY{X: tl.T[k], Y: ys[k]}
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return err
		}
		l.Color = report.Color(i)
		l.Width = width
		if dashed {
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		}
		p.Add(l)
		p.Legend.Add(label, l)
		return nil
	}
	mode := make([]float64, len(tl.Mode))
	for k, m := range tl.Mode {
		if m != "calm" && m != "static" {
			mode[k] = 1
		}
	}
	if err := add(0, "signal", tl.Signal, vg.Points(1.5), false); err != nil {
		return err
	}
	if err := add(1, "mode (1 = rebalance/frozen)", mode, vg.Points(1), true); err != nil {
		return err
	}
	for s, name := range tl.Scorers {
		share := make([]float64, len(tl.T))
		for k := range tl.T {
			var sum float64
			for j := range tl.Scorers {
				sum += tl.Weights[j][k]
			}
			if sum > 0 {
				share[k] = tl.Weights[s][k] / sum
			}
		}
		if err := add(2+s, "weight "+name, share, vg.Points(1.5), false); err != nil {
			return err
		}
	}
	return p.Save(8*vg.Inch, 4.5*vg.Inch, path)
}

func (sw *Sweep) drawLoad(path string, r *Result) error {
	tl := r.Timeline
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s: per-pod load under %s (seed %d)", sw.Scenario.Name, r.Policy, r.Seed)
	p.X.Label.Text = "time (s)"
	p.Y.Label.Text = "running + waiting"
	for i, pod := range tl.PodLoad {
		xys := make(plotter.XYs, len(pod))
		for k := range pod {
			xys[k] = plotter.XY{X: tl.T[k], Y: pod[k]}
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return err
		}
		c := plotutil.Color(i)
		if rgba, ok := c.(color.RGBA); ok {
			rgba.A = 200
			c = rgba
		}
		l.Color = c
		p.Add(l)
	}
	p.Add(plotter.NewGrid())
	return p.Save(8*vg.Inch, 4*vg.Inch, path)
}
