package bench

import (
	"fmt"
	"image/color"
	"os"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/trimtab/trimtab/sim/report"
)

// Images lists one TTFT-over-time figure per (level, policy), from the
// first repeat.
func (rep *Report) Images() []report.Image {
	var out []report.Image
	for _, r := range rep.Runs {
		if r.Repeat != 1 {
			continue
		}
		title := fmt.Sprintf("%s: %s at %s %g, TTFT over time", rep.Scenario.Name, r.Policy, rep.Scenario.LevelUnit(), r.Level)
		out = append(out, report.Image{
			Title: title,
			File:  fmt.Sprintf("bench-real-%s-%s-%g-ttft.png", rep.Scenario.Name, sanitize(r.Policy), r.Level),
			Draw:  func(path string) error { return drawTTFT(path, title, r) },
		})
	}
	return out
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '/' || r == ' ' || r == os.PathSeparator {
			return '_'
		}
		return r
	}, s)
}

// WriteImages draws every figure into dir.
func (rep *Report) WriteImages(dir string) error { return report.WriteImages(dir, rep.Images()) }

var (
	shade   = color.NRGBA{255, 160, 60, 70}
	dotOK   = report.Color(0) // blue
	dotFail = report.Color(3) // red
)

// drawTTFT plots every request's TTFT (failed requests at 0, red) against
// the time it was sent, with the spans in which the router was not calm
// (rebalance or frozen) shaded and the phase boundaries marked.
func drawTTFT(path, title string, r *RunResult) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "time (s)"
	p.Y.Label.Text = "TTFT (ms)"
	var ok, bad plotter.XYs
	top := 1.0
	for _, q := range r.Requests {
		x := q.Sent.Seconds()
		if q.Err != "" {
			bad = append(bad, plotter.XY{X: x, Y: 0})
			continue
		}
		y := msOf(q.TTFT)
		top = max(top, y)
		ok = append(ok, plotter.XY{X: x, Y: y})
	}
	// Shaded spans where the mode is neither calm nor static.
	var from float64
	in, shaded := false, false
	span := func(a, b float64) error {
		poly, err := plotter.NewPolygon(plotter.XYs{{X: a, Y: 0}, {X: b, Y: 0}, {X: b, Y: top}, {X: a, Y: top}})
		if err != nil {
			return err
		}
		poly.Color, poly.LineStyle.Color, poly.LineStyle.Width = shade, shade, 0
		p.Add(poly)
		if !shaded {
			p.Legend.Add("router not calm", poly)
			shaded = true
		}
		return nil
	}
	for _, m := range r.Modes {
		busy := m.Mode == "rebalance" || m.Mode == "frozen"
		if busy && !in {
			from, in = m.T.Seconds(), true
		}
		if !busy && in {
			if err := span(from, m.T.Seconds()); err != nil {
				return err
			}
			in = false
		}
	}
	if in {
		if err := span(from, r.Modes[len(r.Modes)-1].T.Seconds()); err != nil {
			return err
		}
	}
	for _, ph := range r.Phases[1:] {
		l, err := plotter.NewLine(plotter.XYs{{X: ph.Start.Seconds(), Y: 0}, {X: ph.Start.Seconds(), Y: top}})
		if err != nil {
			return err
		}
		l.Color, l.Dashes = color.Gray{Y: 120}, []vg.Length{vg.Points(3), vg.Points(3)}
		p.Add(l)
	}
	for _, set := range []struct {
		xy    plotter.XYs
		c     color.Color
		label string
	}{{ok, dotOK, "TTFT"}, {bad, dotFail, "failed"}} {
		if len(set.xy) == 0 {
			continue
		}
		s, err := plotter.NewScatter(set.xy)
		if err != nil {
			return err
		}
		s.GlyphStyle.Color, s.GlyphStyle.Radius, s.GlyphStyle.Shape = set.c, vg.Points(1.2), draw.CircleGlyph{}
		p.Add(s)
		p.Legend.Add(set.label, s)
	}
	p.Legend.Top = true
	return p.Save(9*vg.Inch, 4*vg.Inch, path)
}
